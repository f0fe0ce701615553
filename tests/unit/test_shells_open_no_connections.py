"""Shells open no connections: a view or a command calls a service, which opens one.

A scan of ``web/`` and ``inbox/cli/`` for the calls that open a connection or a transaction
on an engine (``.connect()``, ``.begin()``, a ``transaction()`` helper). ``NOT_YET`` names
a file that may still open one, and how many times; it is empty and may only stay so.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELLS = (ROOT / "web", ROOT / "inbox" / "cli")
OPENING = {"connect", "begin", "transaction"}
NOT_YET: dict[str, int] = {}


def openings(source: str) -> int:
    """Calls that open a connection or a transaction: ``x.connect()``, ``x.begin()`` with
    no arguments (a session's ``begin(sid, ...)`` is not one), ``transaction()``."""
    found = 0
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or node.args or node.keywords:
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        found += name in OPENING
    return found


def test_the_scan_finds_what_opens_a_connection() -> None:
    view = "with services().engine.connect() as conn:\n    pass\n"
    command = "with transaction() as conn:\n    pass\nwith e.begin() as c:\n    pass\n"
    assert openings(view) == 1 and openings(command) == 2
    assert openings("security.console_session().begin(sid, row, tok, data)\n") == 0


def test_no_shell_opens_a_connection() -> None:
    found = {
        str(p.relative_to(ROOT)): n
        for top in SHELLS
        for p in sorted(top.rglob("*.py"))
        if (n := openings(p.read_text()))
    }
    assert found == NOT_YET
