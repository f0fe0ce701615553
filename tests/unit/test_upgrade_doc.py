"""docs/how-to/upgrade.md names real things: every unit it stops or starts is in
deploy/systemd, every ``inbox`` command it runs exists, and the timeouts it quotes are
the units' and the settings' own. (What the processes do on the way is held by
tests/integration/test_upgrade.py and tests/e2e/test_upgrade_processes.py.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click

from inbox.cli import main
from inbox.infra.config import Settings
from tests.unit.test_deploy_units import unit

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = (ROOT / "docs" / "how-to" / "upgrade.md").read_text()
UNITS = ROOT / "deploy" / "systemd"


def shell_lines() -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", PAGE, re.S)
    lines = [line.split("#")[0].strip() for b in blocks for line in b.splitlines()]
    return [shlex.split(line) for line in lines if line]


def test_every_unit_the_page_names_exists():
    named = [w for words in shell_lines() if words[0] == "systemctl" for w in words[2:]]
    named += re.findall(r"`systemctl \w+ ([\w.-]+)`", PAGE)
    assert {"inbox-beat", "inbox-worker", "inbox-courier", "inbox-web"} <= set(named)
    for name in named:
        file = name if "." in name else f"{name}.service"
        assert (UNITS / file).exists(), name


def test_every_inbox_command_the_page_runs_exists():
    runs = [w for w in shell_lines() if w[0].endswith("inbox")]
    runs += [shlex.split(c) for c in re.findall(r"`(inbox [a-z ]+)`", PAGE)]
    assert any(w[1:] == ["migrate"] for w in runs)
    for words in runs:
        group: click.Command = main
        for word in words[1:]:
            if not isinstance(group, click.Group) or word.startswith("-"):
                break
            sub = group.get_command(click.Context(group), word)
            assert sub is not None, " ".join(words)
            group = sub


def test_the_timeouts_the_page_quotes_are_the_units_and_settings():
    for name in ("inbox-worker.service", "inbox-courier.service"):
        assert unit(name)["Service"]["TimeoutStopSec"] == "60", name
    assert "a worker and a courier 60 s (`TimeoutStopSec`)" in PAGE
    assert Settings().web_graceful_timeout == 30
    assert "(`WEB_GRACEFUL_TIMEOUT`, 30 s)" in PAGE
    for name in ("inbox-worker.service", "inbox-courier.service", "inbox-web.service"):
        service = unit(name)["Service"]
        assert (service["KillSignal"], service["KillMode"]) == ("SIGTERM", "mixed"), name
