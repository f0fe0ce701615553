"""Every ``inbox`` command the console suggests is one the CLI accepts as written, with its
placeholders filled in (parsed by the real command tree, not run)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import click
import pytest

from inbox.cli import main

TEMPLATES = Path(__file__).resolve().parents[2] / "web" / "templates"
HINT = re.compile(r"<code>(inbox [^<]+)</code>")
PLACEHOLDERS = {
    "TENANT": "acme",
    "T": "acme",
    "NAME": "billing",
    "URL": "https://hooks.example/in",
    "SCHEME": "hmac",
    "SECRET": "s3cret",
}

HINTS = sorted(
    (str(path.relative_to(TEMPLATES)), html.unescape(hint))
    for path in TEMPLATES.rglob("*.html")
    for hint in HINT.findall(path.read_text())
)


def filled(hint: str) -> list[str]:
    """The hint as a shell line: optional parts ``[...]`` given, ``a|b`` as ``a``."""
    words = hint.replace("[", "").replace("]", "").split()[1:]
    return [PLACEHOLDERS.get(w, w.split("|")[0]) for w in words]


def parse(args: list[str]) -> click.Command:
    """Parse as ``inbox`` would, down to the command, checking every parameter."""
    cmd: click.Command = main
    path = ["inbox"]
    while isinstance(cmd, click.Group):
        name, *args = args
        sub = cmd.get_command(click.Context(cmd), name)
        assert sub is not None, f"no command {' '.join([*path, name])}"
        cmd, path = sub, [*path, name]
    cmd.make_context(" ".join(path), args)
    return cmd


def test_the_console_has_hints():
    assert {where for where, _ in HINTS} >= {"ui/endpoints.html", "ui/sources.html"}


@pytest.mark.parametrize("where, hint", HINTS)
def test_every_hint_parses(where, hint):
    assert "…" not in hint, f"{where}: {hint} has an elision a shell cannot run"
    try:
        parse(filled(hint))
    except click.ClickException as exc:
        pytest.fail(f"{where}: {hint!r} is refused: {exc.format_message()}")
