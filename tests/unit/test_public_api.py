"""The public API for playbook authors (docs/playbooks.md) does not move.

A playbook module imports these names from ``inbox``; removing one, or making it a
different object than the one the worker runs, breaks every user's playbooks.
"""

from __future__ import annotations

import subprocess
import sys

import inbox
from inbox.domain import errors, ordering, playbooks

# Each public name and the object it must be: the one the runner and the registry use.
PUBLIC = {
    "Playbook": playbooks.Playbook,
    "StepContext": playbooks.StepContext,
    "EventView": playbooks.EventView,
    "EVENT_TYPE": playbooks.EVENT_TYPE,
    "register": playbooks.register,
    "Newer": ordering.Newer,
    "InboxError": errors.InboxError,
    "PlaybookError": errors.PlaybookError,
    "PermanentError": errors.PermanentError,
    "RetryableError": errors.RetryableError,
}


def test_every_public_name_is_exported() -> None:
    assert set(inbox.__all__) == {*PUBLIC, "__version__"}
    from inbox import (  # noqa: F401  (the import itself is the test)
        EVENT_TYPE,
        EventView,
        InboxError,
        Newer,
        PermanentError,
        Playbook,
        PlaybookError,
        RetryableError,
        StepContext,
        register,
    )


def test_every_public_name_is_the_object_the_worker_uses() -> None:
    for name, obj in PUBLIC.items():
        assert getattr(inbox, name) is obj, name
    # register() files playbooks in the registry the runner resolves from.
    assert inbox.register.__self__ is playbooks.registry  # type: ignore[attr-defined]


def test_importing_inbox_loads_no_framework_driver_or_broker() -> None:
    heavy = ["sqlalchemy", "psycopg", "celery", "kombu", "flask", "werkzeug", "redis", "httpx"]
    code = f"import sys, inbox\nprint(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"import inbox pulled in {out}"


def test_the_processes_and_the_cli_start_without_alembic() -> None:
    # Alembic is a fifth of a process's start; only migrating and /readyz need it.
    code = "import sys, web.app, workers.app, inbox.cli\nprint('alembic' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "False"
