"""docs/providers.md: the commands that give a long-retrying provider's source its key
window run as written, and the source then shows that window, which ``key_window_hours``
(what the receiver stamps on each key) takes before any default."""

from __future__ import annotations

import shlex
from pathlib import Path

from click.testing import CliRunner

from inbox.cli import main
from inbox.domain.retention import key_window_hours, min_key_window_hours

PAGE = Path(__file__).resolve().parents[2] / "docs" / "providers.md"


def test_the_pages_key_window_commands_run_and_set_96_hours(database_url, monkeypatch):
    text = PAGE.read_text()
    start = text.index("```sh\n", text.index("retries for longer than a day")) + len("```sh\n")
    block = text[start : text.index("```", start)].replace("\\\n", " ")
    commands = [shlex.split(line) for line in block.splitlines() if line.strip()]
    assert [c[:3] for c in commands] == [
        ["inbox", "sources", "create"],
        ["inbox", "sources", "update"],
    ]
    monkeypatch.setenv("PADDLE_SECRET", "pdl_ntfset_test")
    runner = CliRunner()
    assert runner.invoke(main, ["tenants", "create", "acme"]).exit_code == 0
    assert min_key_window_hours("paddle") == 72  # its 3 days of retries, by default
    for command in commands:
        args = [a.replace("$PADDLE_SECRET", "pdl_ntfset_test") for a in command[1:]]
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
    shown = runner.invoke(main, ["sources", "show", "acme/paddle", "--json"])
    assert '"key_ttl_hours": 96' in shown.output, shown.output
    assert key_window_hours("paddle", 96, 24) == 96 > key_window_hours("paddle", None, 24) == 72
