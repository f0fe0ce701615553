"""The one place the driver's errors become the inbox's own.

Above the store nothing knows psycopg or SQLAlchemy's exceptions: an error of theirs is
wrapped here into an ``InboxError``, the driver's error kept as ``__cause__`` (for the
log line, which names its class). A value the database refuses (sqlstate class 22: out of
range, a NUL, bad text) or cannot encode (a lone surrogate) is the request's fault:
``ValueRefused``, a 400. Anything else is ``StoreUnavailable``, a 503: ``cause="schema"``
when a table or column is missing (not migrated), else ``cause="database"`` (down, slow,
failing over). Which driver errors are an *outage* to a worker is
``inbox.store.db.availability``'s question, not this module's. A deadlock victim or a
serialization failure is ``Contended``: still a 503, but one the caller may send again at
once (the receiver's one retry loop, ``inbox.services.intake``); a database that did not
answer is ``Unreachable``, the same 503.

A use case wraps where it calls the store (``wrap_exceptions``). A shell that still runs a
read itself (a view, a CLI command) asks ``own_error`` of what it caught, through
``inbox.services.failures``: no module outside the store names a driver's exception type
(an import-linter contract for psycopg, ruff's banned-api for ``sqlalchemy.exc``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import errors as pgerrors
from sqlalchemy.exc import DBAPIError, SQLAlchemyError  # noqa: TID251
from sqlalchemy.exc import TimeoutError as PoolTimeout  # noqa: TID251

from inbox.domain.errors import SchemaBehind, StoreUnavailable, ValueRefused
from inbox.store.db.claims import RETRIED

# What the edges register a handler for: a statement's error (SQLAlchemy wraps the
# driver's), no pooled connection in time, and the driver's own (the receiver's claim
# goes to the driver directly).
DRIVER_ERRORS: tuple[type[Exception], ...] = (DBAPIError, PoolTimeout, psycopg.Error)
# Every error the database toolkit or its driver raises, for a caller that gives up on
# the store quietly (a console session not saved after the page is rendered).
STORE_ERRORS: tuple[type[Exception], ...] = (SQLAlchemyError, psycopg.Error)
_WRAPPED: tuple[type[Exception], ...] = (*DRIVER_ERRORS, UnicodeEncodeError)

_SCHEMA_ERRORS = (pgerrors.UndefinedTable, pgerrors.UndefinedColumn)


class Contended(StoreUnavailable):
    """The database rolled this request's statement back (a deadlock victim or a
    serialization failure); retry later."""


class Unreachable(StoreUnavailable):
    """The inbox cannot store events right now; retry later."""

    # The database did not answer: down, refusing connections, failing over, or no pooled
    # connection within the deadline. The same answer as its parent (the docstring is the
    # message); an operator's terminal says "cannot reach the database" for it.


def _driver(err: BaseException) -> BaseException:
    return err.orig if isinstance(err, DBAPIError) and err.orig is not None else err


def refused(err: BaseException) -> bool:
    """A refusal of the request's values, not an outage."""
    orig = _driver(err)
    if isinstance(orig, psycopg.DataError | UnicodeEncodeError):
        return True
    sqlstate = getattr(orig, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate.startswith("22")


def retryable(err: BaseException) -> bool:
    """A deadlock victim or a serialization failure: PostgreSQL rolled the transaction
    back whole and a second attempt may pass."""
    return isinstance(_driver(err), RETRIED)


def wrap(err: BaseException) -> ValueRefused | StoreUnavailable:
    """The inbox's own error for a driver error, with the driver's as ``__cause__``."""
    own: ValueRefused | StoreUnavailable
    if refused(err):
        own = ValueRefused()
    elif isinstance(_driver(err), _SCHEMA_ERRORS):
        own = SchemaBehind()
    elif retryable(err):
        own = Contended()
    elif isinstance(_driver(err), psycopg.OperationalError | PoolTimeout):
        own = Unreachable()
    else:
        own = StoreUnavailable()
    own.__cause__ = err
    return own


def own_error(err: BaseException) -> ValueRefused | StoreUnavailable | None:
    """The inbox's own error for ``err`` when it is the driver's (as ``wrap``), else None:
    what a shell asks of an error it caught, so that it names no driver type."""
    return wrap(err) if isinstance(err, _WRAPPED) else None


def _below(err: BaseException) -> BaseException:
    """The driver's error under ``err`` (a wrapped error's cause), or ``err`` itself."""
    cause = err.__cause__ if isinstance(err, ValueRefused | StoreUnavailable) else err
    return _driver(cause) if cause is not None else err


def reason(err: BaseException) -> str:
    """The first line of the driver's own message below ``err``, or its class's name when
    it says nothing: for an operator's terminal or a log line, never a response body (it
    may quote a value)."""
    text = str(_below(err)).strip()
    return text.splitlines()[0] if text else type(_below(err)).__name__


def driver_class(err: BaseException) -> str:
    """The name of the driver's error class below ``err`` (``UniqueViolation``), for a log
    line or a terminal."""
    return type(_below(err)).__name__


@contextmanager
def wrap_exceptions() -> Iterator[None]:
    """Raise the inbox's own error for any driver error raised inside."""
    try:
        yield
    except _WRAPPED as err:
        raise wrap(err) from err
