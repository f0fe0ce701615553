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
    from inbox.store.db.errors import Contended, Unreachable

    down = OperationalError("SELECT 1", {}, psycopg.OperationalError("connection refused"))
    refused = DataError("SELECT 1", {}, psycopg.errors.NumericValueOutOfRange("out of range"))
    missing = psycopg.errors.UndefinedTable("relation does not exist")
    victim = OperationalError("INSERT", {}, psycopg.errors.DeadlockDetected("deadlock"))
    for err, kind, status in [
        (down, Unreachable, 503),
        (
            OperationalError("SELECT 1", {}, psycopg.errors.UniqueViolation("dup")),
            StoreUnavailable,
            503,
        ),
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


def test_unreachable_answers_as_its_parent():
    """Unreachable is for an operator's terminal; a client sees StoreUnavailable's 503."""
    from inbox.domain.errors import StoreUnavailable
    from inbox.store.db.errors import Unreachable

    assert Unreachable().body() == StoreUnavailable().body()
    assert Unreachable.retry_after == StoreUnavailable.retry_after


def test_a_shell_learns_the_stores_error_or_none():
    import psycopg
    from sqlalchemy.exc import IntegrityError, OperationalError

    from inbox.services import failures

    for not_the_stores in (KeyError("k"), ValueError("v"), RuntimeError("r")):
        assert failures.own(not_the_stores) is None
    down = OperationalError("SELECT 1", {}, psycopg.OperationalError("no route\nmore"))
    missing = psycopg.errors.UndefinedTable("relation does not exist")
    refused = psycopg.errors.NumericValueOutOfRange("out of range")
    dup = IntegrityError("INSERT", {}, psycopg.errors.UniqueViolation("duplicate key"))
    said = {
        name: failures.explain(own, "db@h")
        for name, err in [("down", down), ("missing", missing), ("refused", refused), ("dup", dup)]
        if (own := failures.own(err)) is not None and own.__cause__ is err
    }
    assert said == {
        "down": "cannot reach the database at db@h: no route",
        "missing": "the schema is not migrated (or is behind this version): run inbox migrate",
        "refused": "the database refused a value: out of range",
        "dup": "database error (UniqueViolation)",
    }


_DRIVER_IMPORT = ("import psycopg", "from psycopg", "sqlalchemy.exc")


def driver_imports(sources: dict[str, str]) -> list[str]:
    """``path: line`` for every line outside inbox/store/ that imports a driver's errors
    (psycopg, sqlalchemy.exc), whatever its noqa says."""
    return [
        f"{path}: {line.strip()}"
        for path, text in sources.items()
        if not path.startswith("inbox/store/")
        for line in text.splitlines()
        if line.lstrip().startswith(("import ", "from ")) and any(d in line for d in _DRIVER_IMPORT)
    ]


def test_the_finder_finds_a_driver_import_outside_the_store():
    sources = {
        "inbox/store/db/errors.py": "import psycopg\nfrom sqlalchemy.exc import DBAPIError",
        "inbox/cli/base.py": "from sqlalchemy.exc import DBAPIError  # noqa: TID251",
        "web/errors.py": "from psycopg import errors",
    }
    assert driver_imports(sources) == [
        "inbox/cli/base.py: from sqlalchemy.exc import DBAPIError  # noqa: TID251",
        "web/errors.py: from psycopg import errors",
    ]


def test_no_driver_exception_is_imported_outside_the_store():
    """import-linter holds psycopg and ruff sqlalchemy.exc; a `noqa` would silence ruff,
    so this walk holds the rule where pytest runs, noqa or not."""
    sources = {
        str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert len(sources) > 100
    assert driver_imports(sources) == []
