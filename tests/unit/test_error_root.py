"""Every exception class the project defines derives from ``InboxError``: one root, so a
caller (the CLI's last resort, a playbook author's ``except``) can catch the inbox's own
errors apart from everyone else's."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from inbox.domain.errors import InboxError
from inbox.store.db import errors as db_errors

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("inbox", "web", "workers")


def _classes() -> list[tuple[str, str]]:
    """(module, class name) of every class statement at the top of a project module."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
            if names:
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                found += [(module.removesuffix(".__init__"), name) for name in names]
    return found


def test_every_project_exception_derives_from_inbox_error():
    classes = _classes()
    exceptions = []
    for module, name in classes:
        cls = getattr(importlib.import_module(module), name)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            exceptions.append(cls)
    assert len(exceptions) > 30  # the walk found the project's errors, not nothing
    strays = [c for c in exceptions if not issubclass(c, InboxError)]
    assert [f"{c.__module__}.{c.__qualname__}" for c in strays] == []


def test_driver_errors_are_wrapped_with_their_cause():
    import psycopg
    from sqlalchemy.exc import DataError, OperationalError

    from inbox.domain.errors import SchemaBehind, StoreUnavailable, ValueRefused
    from inbox.store.db.errors import Contended

    down = OperationalError("SELECT 1", {}, psycopg.OperationalError("connection refused"))
    refused = DataError("SELECT 1", {}, psycopg.errors.NumericValueOutOfRange("out of range"))
    missing = psycopg.errors.UndefinedTable("relation does not exist")
    victim = OperationalError("INSERT", {}, psycopg.errors.DeadlockDetected("deadlock"))
    for err, kind, status in [
        (down, StoreUnavailable, 503),
        # a deadlock victim or serialization failure: the receiver sends its claim again
        (victim, Contended, 503),
        (psycopg.errors.SerializationFailure("could not serialize"), Contended, 503),
        (refused, ValueRefused, 400),
        (missing, SchemaBehind, 503),
        (UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogate"), ValueRefused, 400),
    ]:
        own = db_errors.wrap(err)
        assert type(own) is kind and own.http_status == status and own.__cause__ is err
    assert db_errors.wrap(down).body()["error"]["cause"] == "database"
    assert db_errors.wrap(missing).body()["error"]["cause"] == "schema"
