"""The receiver's checks are written once: ``web.ingest.take`` holds their order, and the
Flask view and the WSGI fast path (``web/receiver.py``) both call it."""

from __future__ import annotations

import ast
from pathlib import Path

WEB = Path(__file__).resolve().parents[2] / "web"
CHECKS = {"check_backlog", "check_rate", "prepare", "receive"}


def _calls(path: Path) -> dict[str, list[str]]:
    """Each function of the module, with the names of the checks it calls."""
    out: dict[str, list[str]] = {}
    for fn in ast.walk(ast.parse(path.read_text())):
        if isinstance(fn, ast.FunctionDef):
            names = [
                n.func.attr
                for n in ast.walk(fn)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            ]
            out[fn.name] = [n for n in names if n in CHECKS]
    return out


def test_only_take_calls_the_checks() -> None:
    callers = {
        f"{p.name}:{fn}": sorted(found)
        for p in (WEB / "ingest.py", WEB / "receiver.py")
        for fn, found in _calls(p).items()
        if found
    }
    assert callers == {"ingest.py:take": ["check_backlog", "check_rate", "prepare", "receive"]}


def test_both_paths_go_through_take() -> None:
    for path, fn in ((WEB / "ingest.py", "receive"), (WEB / "receiver.py", "_receive")):
        tree = ast.parse(path.read_text())
        [found] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == fn]
        called = {
            n.func.id
            for n in ast.walk(found)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        assert "take" in called, path.name
