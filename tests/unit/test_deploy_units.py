"""deploy/systemd: one unit per Procfile process, restarted always, configured by one file."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
UNITS = ROOT / "deploy" / "systemd"


def unit(name: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read(UNITS / name)
    return cp


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return {n.strip(): c.strip() for n, _, c in (x.partition(":") for x in lines) if c}


def words(cmd: str) -> list[str]:
    """The command's words, without paths to the executables and variables' defaults."""
    cmd = re.sub(r"\$\{(\w+):-[^}]*\}", r"${\1}", cmd)  # ${X:-2} (shell) == ${X} (systemd)
    cmd = re.sub(r"\S*/\.venv/bin/", "", cmd).replace("%h", "%H")
    return [w for w in cmd.split() if not w.startswith("--schedule") and "schedule" not in w]


def test_every_procfile_process_has_a_unit_that_always_restarts():
    target = unit("webhook-inbox.target")["Unit"]["Wants"].split()
    for name, cmd in procfile().items():
        u = unit(f"inbox-{name}.service")
        assert u["Service"]["Restart"] == "always", name
        assert u["Unit"]["StartLimitIntervalSec"] == "0", name  # never given up on
        assert u["Service"]["EnvironmentFile"] == "/etc/webhook-inbox/inbox.env", name
        assert words(u["Service"]["ExecStart"]) == words(cmd), name
        assert f"inbox-{name}.service" in target
    migrate = unit("inbox-migrate.service")
    assert migrate["Service"]["ExecStart"].endswith("/inbox migrate")
    assert (UNITS / "README.md").exists() and (UNITS / "inbox.env.example").exists()


def test_no_procfile_process_needs_a_path_of_the_checkout():
    # beat keeps its schedule in memory (workers/beat.py): no .data/, no file to write.
    for name, cmd in procfile().items():
        assert ".data" not in cmd and "--schedule" not in cmd, name
    beat = unit("inbox-beat.service")["Service"]["ExecStart"]
    assert "--schedule" not in beat


def test_a_wrong_setting_is_not_restarted_forever():
    # inbox/services/startup.py exits 78 (EX_CONFIG) when a setting is missing or wrong.
    from inbox.services.startup import EX_CONFIG

    for name in procfile():
        assert unit(f"inbox-{name}.service")["Service"]["RestartPreventExitStatus"] == str(
            EX_CONFIG
        ), name


def test_the_worker_and_courier_neither_mingle_nor_gossip():
    """docs/how-to/deploy.md: no task is revoked and no worker event is read, so neither
    waits a second at start for its peers nor consumes their heartbeats."""
    for name in ("worker", "courier"):
        for cmd in (procfile()[name], unit(f"inbox-{name}.service")["Service"]["ExecStart"]):
            assert {"--without-mingle", "--without-gossip"} <= set(cmd.split()), (name, cmd)
