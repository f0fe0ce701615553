"""``inbox --help`` and every group's help list each command with its first sentence whole,
wrapped at the terminal's width, never cut with '...'."""

from __future__ import annotations

import click
from click.testing import CliRunner

from inbox.cli import main
from inbox.cli.base import summary


def groups(group: click.Group = main, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            found += groups(cmd, (*path, name))
    return found


def test_every_group_lists_whole_first_sentences():
    listed = 0
    for path in groups():
        out = CliRunner().invoke(main, [*path, "--help"], terminal_width=80).output
        listing = out.split("\nCommands:\n")[1]
        assert "..." not in listing, (path, listing)
        flat = " ".join(listing.split())
        group = main
        for name in path:
            group = group.commands[name]  # type: ignore[attr-defined]
        for name, cmd in group.commands.items():  # type: ignore[attr-defined]
            whole = summary(cmd)
            assert whole.endswith(".") or "." not in whole, (name, whole)
            assert f"{name} {whole}" in flat, (path, name, whole)
            listed += 1
    assert listed > 40
