"""Is the database there, and does it take writes? The driver's errors read as one cause.

A failover (Patroni promoting the standby, a switchover, a primary demoted while its
consensus store is away) shows up in a process as driver errors: the server shutting
down (``AdminShutdown``), a refused or lost connection, no host of a multi-host URL
accepting writes, a write refused by a read-only server. ``unavailable`` says, in one
line, whether an error is one of those, so a worker logs an outage once instead of a
traceback per task; ``writable`` is the readiness probe's question to a live server.
"""

from __future__ import annotations

import psycopg
from psycopg import errors as pgerrors
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError  # noqa: TID251
from sqlalchemy.exc import TimeoutError as PoolTimeout  # noqa: TID251

OK = "ok"
_MESSAGE_LIMIT = 200
# Errors of a live server about one statement, not about the server: a timeout on a slow
# statement or a lock is not an outage.
_NOT_AN_OUTAGE = (pgerrors.QueryCanceled, pgerrors.LockNotAvailable)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:_MESSAGE_LIMIT] if lines else "no message"


def unavailable(exc: BaseException) -> str | None:
    """``"<error class>: <first line>"`` when ``exc`` means the database cannot be used now
    (unreachable, shutting down, no connection in time, read-only); None for any other
    error, which is the caller's own to report."""
    if isinstance(exc, PoolTimeout):
        return f"PoolTimeout: {_first_line(exc)}"
    orig: BaseException = exc.orig if isinstance(exc, DBAPIError) and exc.orig else exc
    if isinstance(orig, pgerrors.ReadOnlySqlTransaction):
        return f"read-only: {_first_line(orig)}"
    if isinstance(orig, psycopg.OperationalError) and not isinstance(orig, _NOT_AN_OUTAGE):
        return f"{type(orig).__name__}: {_first_line(orig)}"
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return f"{type(orig).__name__}: {_first_line(orig)}"
    return None


def busy(exc: BaseException) -> str | None:
    """``"<error class>: <first line>"`` when ``exc`` is a live server cutting one statement
    at its deadline (``statement_timeout``, ``lock_timeout``): a row another transaction
    holds, or a server too slow for now; None for any other error."""
    orig: BaseException = exc.orig if isinstance(exc, DBAPIError) and exc.orig else exc
    if isinstance(orig, _NOT_AN_OUTAGE):
        return f"{type(orig).__name__}: {_first_line(orig)}"
    return None


def unreachable(exc: BaseException) -> str:
    """What the readiness probe says of a database it could not use: ``read-only: …`` when
    libpq refused every host for ``target_session_attrs=read-write`` (a failover under
    way: no node is the primary yet), else ``unreachable: <error class>``. No address or
    message: the answer is public."""
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig else exc
    if isinstance(orig, psycopg.OperationalError) and "session is read-only" in str(orig):
        return "read-only: no host of DATABASE_URL accepts writes"
    return f"unreachable: {type(exc).__name__}"


_WRITABLE = text(
    "SELECT pg_is_in_recovery() AS recovery,"
    " current_setting('transaction_read_only') = 'on' AS read_only"
)


def writable(conn: Connection) -> str:
    """``"ok"`` when the server on ``conn`` takes writes; otherwise why not: a standby
    (in recovery, e.g. a demoted primary) or a read-only session
    (``default_transaction_read_only``)."""
    found = conn.execute(_WRITABLE).one()
    if found.recovery:
        return "read-only: the server is a standby (in recovery)"
    if found.read_only:
        return "read-only: transaction_read_only is on"
    return OK
