"""Is the database there, and does it take writes? The driver's errors read as one cause.

A failover (Patroni promoting the standby, a switchover, a primary demoted while its
consensus store is away) shows up in a process as driver errors: the server shutting
down (``AdminShutdown``), a refused or lost connection, no host of a multi-host URL
accepting writes, a write refused by a read-only server. ``unavailable`` says, in one
line, whether an error is one of those, so a worker logs an outage once instead of a
traceback per task; ``writable`` is the readiness probe's question to a live server.
"""

from __future__ import annotations

import re

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
    way: no node is the primary yet), ``refused: <the server's reason>`` when a server
    answered and turned the connection away (``refusal``), else ``unreachable: <error
    class>``. No address: the answer is public."""
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig else exc
    if isinstance(orig, psycopg.OperationalError) and "session is read-only" in str(orig):
        return "read-only: no host of DATABASE_URL accepts writes"
    reason = refusal(exc)
    if reason is not None:
        return f"refused: {reason}"
    return f"unreachable: {type(exc).__name__}"


# A server that answers and turns the connection away says why after "FATAL:" (libpq does
# not give connection errors an SQLSTATE): 'database "inbox" does not exist'.
_FATAL = re.compile(r"FATAL:\s+(.+)")
# Reasons that waiting will not cure: DATABASE_URL (or the server's setup) is wrong.
_WRONG_URL = (
    (
        re.compile(r'^database ".*" does not exist'),
        "create it, or correct its name in DATABASE_URL",
    ),
    (
        re.compile(r'^role ".*" does not exist|password authentication failed|no pg_hba'),
        "correct the user or password in DATABASE_URL, or the server's pg_hba.conf",
    ),
)


def refusal(exc: BaseException) -> str | None:
    """The server's own reason when it answered and refused the connection (a database or
    role that does not exist, a password it rejects, starting up, too many clients); None
    when no server answered (refused, timed out, unknown host) or for any other error."""
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig else exc
    if not isinstance(orig, psycopg.OperationalError):
        return None
    found = _FATAL.search(str(orig))
    return found.group(1).strip()[:_MESSAGE_LIMIT] if found else None


def remedy(reason: str) -> str | None:
    """What to change when a refusal's ``reason`` is one that waiting will not cure."""
    for pattern, fix in _WRONG_URL:
        if pattern.search(reason):
            return fix
    return None


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
