"""What a shell makes of an error it caught: the inbox's own, or not the store's at all.

The store turns the driver's errors into the inbox's own (``inbox.store.db.errors``);
a use case does so where it calls the store. A shell that runs a read itself (a view, a
CLI command) can still meet a driver error, and asks here instead of naming the driver's
types: ``own`` is the inbox's error for it (None when the error is not the store's),
``explain`` the one line an operator's terminal shows for it.
"""

from __future__ import annotations

from inbox.domain.errors import SchemaBehind, StoreUnavailable, ValueRefused
from inbox.store.db import errors as store


def own(err: BaseException) -> ValueRefused | StoreUnavailable | None:
    """The inbox's own error for a driver error (its ``__cause__``), else None."""
    return store.own_error(err)


def explain(err: ValueRefused | StoreUnavailable, database: str) -> str:
    """One line for a store error: what is wrong and what to do (``database``: the
    database's name without its password)."""
    if isinstance(err, SchemaBehind):
        return "the schema is not migrated (or is behind this version): run inbox migrate"
    if isinstance(err, store.Unreachable):
        return f"cannot reach the database at {database}: {store.reason(err)}"
    if isinstance(err, ValueRefused):
        return f"the database refused a value: {store.reason(err)}"
    if isinstance(err, StoreUnavailable) and err.cause != StoreUnavailable.cause:
        # Another store than the inbox's database (the key store): its own line says which.
        return f"{err.message.rstrip('.')} ({store.reason(err)})"
    return f"database error ({store.driver_class(err)})"
