"""The read model's shape: one style (named ``text()`` statements), the scope written once.

``inbox/store/reads/__init__.py`` says reads are ``text()`` statements: a module of the read
model imports from SQLAlchemy only what running one takes, never the Core query builders
or the tables; and the tenant-scope condition is ``scope.scoped``, written once.
"""

from __future__ import annotations

import ast
from pathlib import Path

READS = Path(__file__).resolve().parents[2] / "inbox" / "store" / "reads"
# What running a named statement takes; a builder (select, func, ...) is the other style.
RUNNING = {"Connection", "text", "TextClause", "Row"}


def _modules() -> list[Path]:
    return sorted(READS.glob("*.py"))


def builders(source: str) -> list[str]:
    """Names a module imports from SQLAlchemy beyond what running a statement takes, and
    any import of the schema's tables."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("sqlalchemy"):
                found += [a.name for a in node.names if a.name not in RUNNING]
            if node.module in ("inbox.store.schema.tables", "inbox.store.schema.config_tables"):
                found += [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("sqlalchemy")]
    return found


def test_the_check_finds_a_core_query() -> None:
    core = (
        "from sqlalchemy import Connection, select\nfrom inbox.store.schema.tables import events\n"
    )
    assert builders(core) == ["select", "events"]
    assert builders("from sqlalchemy import Connection, text\n") == []


def test_every_read_is_a_text_statement() -> None:
    found = {p.name: b for p in _modules() if (b := builders(p.read_text()))}
    assert found == {}


def test_the_scope_condition_is_written_once() -> None:
    written = [p.name for p in _modules() if "CAST(:scope AS bigint) IS NULL" in p.read_text()]
    assert written == ["scope.py"]
