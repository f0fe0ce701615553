"""The claiming INSERT, and group commit: concurrent requests of one process share it.

A claim is ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` in autocommit: a row back means
the request owns its key and the row is committed, so 2xx may be sent. When several
threads of one receiver process claim at the same time, ``Claims`` sends their rows as
one multi-row INSERT: one round trip and one commit for all of them, instead of one each.
Nobody waits for company: the first thread runs its row alone at once; whoever arrives
while that statement is out queues, and the next statement takes the whole queue. A
request is answered only from its own row's outcome, after the statement that carried
it has committed, so the contract is the same as for a claim of its own.

Rows whose key is already in the statement wait for the next one (two rows with one key
in one INSERT would leave it to row order which copy wins; one at a time, PostgreSQL
decides, as it does across processes). A row that PostgreSQL refuses (bad data, a
source deleted meanwhile) fails only itself: the others are retried one by one.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import deque
from collections.abc import Callable
from functools import lru_cache, partial
from typing import Any

import psycopg
from sqlalchemy import Engine
from sqlalchemy.pool import PoolProxiedConnection

from inbox.domain.intake import Prepared
from inbox.domain.records import Source

_COLUMNS = """public_id, tenant_id, source_id, key_digest, key_expires_at, event_type,
    business_key_digest, ordering_key, content_type, body, body_sha256, headers,
    response_status, response_body, sync, max_attempts"""

_FIELDS = 16  # parameters per row, in ``row``'s order
MAX_ROWS = 64  # per statement; a process rarely has more threads than this


def _values(first: int) -> str:
    """One row's VALUES item, with PostgreSQL's own numbered placeholders from ``first``."""
    p = [f"${first + i}" for i in range(_FIELDS)]
    p[4] = f"now() + make_interval(hours => CAST({p[4]} AS integer))"  # the database's clock
    p[11] = f"CAST({p[11]} AS jsonb)"
    return "(" + ", ".join(p) + ")"


@lru_cache(maxsize=MAX_ROWS)
def statement(rows: int) -> str:
    """The claiming INSERT for this many rows; RETURNING says which rows went in.

    Numbered placeholders, for a ``psycopg.RawCursor``: the driver sends the text as it is.
    With ``%s`` placeholders it parses the statement on every call once it has more than
    50 parameters (its cache stops there), which cost ~30 us per row in a batch of eight.
    """
    values = ", ".join(_values(1 + r * _FIELDS) for r in range(rows))
    return (
        f"INSERT INTO events ({_COLUMNS}) VALUES {values}"
        " ON CONFLICT (tenant_id, source_id, key_digest) WHERE key_digest IS NOT NULL"
        " DO NOTHING RETURNING id, public_id"
    )


def row(source: Source, ev: Prepared) -> tuple[Any, ...]:
    """One event's parameters, in ``_COLUMNS``' order."""
    return (
        ev.public_id,
        source.tenant_id,
        source.id,
        ev.key_digest,
        None if ev.key_digest is None else ev.key_expires_hours,
        ev.event_type,
        ev.business_key_digest,
        ev.business_key_digest if source.options.serialize_by_business_key else None,
        ev.content_type,
        ev.body,
        ev.body_sha256,
        json.dumps(ev.headers),
        ev.response_status,
        ev.response_body,
        ev.wait_seconds is not None,
        source.options.max_attempts,
    )


def _cursor(driver: psycopg.Connection[Any], info: dict[Any, Any]) -> psycopg.RawCursor[Any]:
    """The claim's cursor, kept with its connection (``info``: the pool's per-connection
    dict): making one per statement costs about a fifth of a one-row claim's CPU."""
    cur = info.get("inbox_claim_cursor")
    if cur is None or cur.closed:
        cur = info["inbox_claim_cursor"] = psycopg.RawCursor(driver)
    assert isinstance(cur, psycopg.RawCursor)
    return cur


def execute(pooled: PoolProxiedConnection, rows: list[tuple[Any, ...]]) -> dict[str, int]:
    """The claiming INSERT for ``rows`` on ``pooled`` as it is (autocommit, or inside the
    caller's transaction); the public ids that went in, with their row ids."""
    driver = pooled.driver_connection
    assert isinstance(driver, psycopg.Connection)
    params = [value for r in rows for value in r]
    found = _cursor(driver, pooled.info).execute(statement(len(rows)), params).fetchall()
    return {public_id: event_id for event_id, public_id in found}


def insert(engine: Engine, rows: list[tuple[Any, ...]]) -> dict[str, int]:
    """Run the claiming INSERT for ``rows`` in autocommit; the public ids that went in.

    This goes to the driver directly, on a connection from the engine's pool: measured
    in-process, SQLAlchemy's Connection/Result machinery plus separate BEGIN and COMMIT
    round trips cost ~40 % of the receiver's CPU per event. Driver errors (psycopg.Error)
    reach the caller unwrapped; the web maps them to 503.
    """
    pooled = engine.raw_connection()
    driver = pooled.driver_connection
    assert isinstance(driver, psycopg.Connection)
    try:
        driver.autocommit = True
        try:
            return execute(pooled, rows)
        finally:
            if not driver.closed:  # back to the pool as it came: transactions for the rest
                driver.autocommit = False
    finally:
        pooled.close()  # the pool drops a connection that died


def _own_copy(error: BaseException) -> BaseException:
    """A copy of a failed statement's error for one of the claims it carried: each thread
    raises an object of its own, instead of all of them growing one shared traceback.
    The copy has no traceback yet and keeps the driver's details (sqlstate, diag)."""
    try:
        return copy.copy(error)
    except Exception:  # cannot be copied: the shared object, rather than a new failure
        return error


class _Ticket:
    """One waiting claim. ``wake`` is held until the thread may go on."""

    __slots__ = ("alone", "error", "event_id", "key", "lead", "public_id", "row", "wake")

    def __init__(self, row: tuple[Any, ...], key: tuple[Any, ...] | None) -> None:
        self.row = row
        self.key = key
        self.public_id: str = row[0]
        self.wake = threading.Lock()
        self.wake.acquire()
        self.lead = False  # woken to run the next statement
        self.alone = False  # woken to retry in a statement of its own
        self.event_id: int | None = None
        self.error: BaseException | None = None


# Runs one claiming INSERT for the rows, committed; the public ids that went in.
Send = Callable[[list[tuple[Any, ...]]], dict[str, int]]


class Claims:
    """Group commit for one process's claims (one per app; thread-safe).

    ``send`` runs each statement (``insert`` on ``engine`` unless given): the queueing and
    batching here are tested against an in-memory one.
    """

    def __init__(
        self, engine: Engine | None, max_rows: int = MAX_ROWS, *, send: Send | None = None
    ) -> None:
        if send is None:
            if engine is None:
                raise ValueError("Claims needs an engine or a send function")
            send = partial(insert, engine)
        self._send = send
        self._max_rows = max_rows
        self._mutex = threading.Lock()
        self._queue: deque[_Ticket] = deque()
        self._leading = False  # a statement is out, or its successor is being woken
        self.statements = 0  # statements sent, for tests and the benchmark

    def pending(self) -> int:
        with self._mutex:
            return len(self._queue)

    def claim(self, source: Source, ev: Prepared) -> int | None:
        """The new event's row id once it is committed, or None when the key is taken."""
        key = None if ev.key_digest is None else (source.tenant_id, source.id, ev.key_digest)
        ticket = _Ticket(row(source, ev), key)
        with self._mutex:
            self._queue.append(ticket)
            lead = not self._leading
            self._leading = True
        if not lead:
            ticket.wake.acquire()
            lead = ticket.lead
        if lead:
            self._lead()
        if ticket.alone:
            return self._send([ticket.row]).get(ticket.public_id)
        if ticket.error is not None:
            own = ticket.error if lead else _own_copy(ticket.error)
            if own is ticket.error:
                raise own
            raise own from ticket.error
        return ticket.event_id

    def _take(self) -> list[_Ticket]:
        """The queue's head and every later ticket whose key is not in the batch yet."""
        batch: list[_Ticket] = []
        keys: set[tuple[Any, ...]] = set()
        kept: deque[_Ticket] = deque()
        with self._mutex:
            while self._queue and len(batch) < self._max_rows:
                ticket = self._queue.popleft()
                if ticket.key is not None and ticket.key in keys:
                    kept.append(ticket)
                    continue
                if ticket.key is not None:
                    keys.add(ticket.key)
                batch.append(ticket)
            self._queue.extendleft(reversed(kept))
        return batch

    def _lead(self) -> None:
        batch = self._take()
        try:
            self._run(batch)
        finally:
            with self._mutex:
                successor = self._queue[0] if self._queue else None
                if successor is None:
                    self._leading = False
                else:
                    successor.lead = True
            if successor is not None:
                successor.wake.release()
            for ticket in batch[1:]:  # batch[0] is the leader's own
                ticket.wake.release()

    def _run(self, batch: list[_Ticket]) -> None:
        self.statements += 1
        try:
            inserted = self._send([t.row for t in batch])
        except (psycopg.DataError, psycopg.IntegrityError) as exc:
            if len(batch) == 1:
                batch[0].error = exc
            else:  # one row was refused: each retries alone, so it fails only itself
                for ticket in batch:
                    ticket.alone = True
            return
        except Exception as exc:  # the database is down or too slow: all of them hear so
            for ticket in batch:
                ticket.error = exc
            return
        for ticket in batch:
            ticket.event_id = inserted.get(ticket.public_id)
