"""The claiming INSERT, and group commit: concurrent requests of one process share it.

A claim is one statement in autocommit: the key into ``event_keys`` ON CONFLICT DO
NOTHING, and the event only where the key went in (``statement``); a row back means the
request owns its key and the row is committed, so 2xx may be sent. When several
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

One lock order: every statement carries its rows sorted by key. A row whose key another
statement has inserted but not yet committed waits for that statement; two statements
(of two processes) that took two keys in opposite orders would wait on each other until
PostgreSQL's deadlock detector killed one, and every request it carried would hear 503.
Sorted, a statement only ever waits on keys above all those it holds, so no wait can
close a circle. A deadlock or serialization failure that happens anyway is retried, a
few times, within the requests' deadline: such a statement was rolled back whole.

Every wait ends by the request's deadline (``inbox.store.engine.deadline``, else the
settings' database timeout from now): in the queue, at the pool, and in the statement.
A claim that runs out of time raises ``ClaimTimeout`` (503): its row may still commit,
which is safe, as the sender's retry is then answered as a duplicate; a 2xx is only
ever sent for a row that has committed.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from functools import lru_cache, partial
from typing import Any

import psycopg
from psycopg.errors import DeadlockDetected, SerializationFailure
from sqlalchemy import Engine
from sqlalchemy.pool import PoolProxiedConnection

from inbox.domain.intake import Prepared
from inbox.domain.records import Source
from inbox.store.engine import (
    DEFAULT_TIMEOUT_S,
    TIMEOUT_INFO,
    current_deadline,
    deadline_at,
    watchdog,
)

log = logging.getLogger(__name__)

# One row's parameters, in order, with the type each is cast to: the rows travel in a
# VALUES list (a CTE), whose columns take no type from the tables they go into.
_PARAMS = (
    ("public_id", "text"),
    ("tenant_id", "bigint"),
    ("source_id", "bigint"),
    ("key_digest", "bytea"),
    ("key_hours", "integer"),
    ("event_type", "text"),
    ("business_key_digest", "bytea"),
    ("ordering_key", "bytea"),
    ("content_type", "text"),
    ("body", "bytea"),
    ("body_sha256", "bytea"),
    ("headers", "jsonb"),
    ("response_status", "integer"),
    ("response_body", "bytea"),
    ("sync", "boolean"),
    ("max_attempts", "integer"),
)
_EVENT_COLUMNS = ", ".join(
    ["id", "key_digest"] + [n for n, _ in _PARAMS if n not in ("key_hours", "key_digest")]
)
_KEY_COLUMNS = """tenant_id, source_id, key_digest, event_id, public_id, expires_at,
    body_sha256, response_status, response_body, sync"""

_FIELDS = 16  # parameters per row, in ``row``'s order
MAX_ROWS = 64  # per statement; a process rarely has more threads than this
# Statements one process may have out at once (INBOX_CLAIM_STATEMENTS). With more than one,
# a statement goes out while another waits for its commit, and PostgreSQL flushes their
# WAL together; copies of a key in two of them wait on each other as they would across
# processes, and the lock order keeps that from closing a circle. One is the default: on
# the 2-core benchmark machine two did not do better (bench/README.md).
STATEMENTS = 1
ATTEMPTS = 3  # a statement chosen as a deadlock victim is sent again, at most this often
# What PostgreSQL rolls back whole and a second attempt may pass (SQLSTATE 40P01, 40001).
RETRIED = (DeadlockDetected, SerializationFailure)


class ClaimTimeout(psycopg.OperationalError):
    """The claim could not be decided by the request's deadline (the web answers 503)."""


def _values(first: int) -> str:
    """One row's VALUES item, with PostgreSQL's own numbered placeholders from ``first``."""
    p = [f"CAST(${first + i} AS {t})" for i, (_, t) in enumerate(_PARAMS)]
    return "(" + ", ".join(p) + ")"


@lru_cache(maxsize=MAX_ROWS)
def statement(rows: int) -> str:
    """The claiming statement for this many rows; RETURNING says which events went in.

    The keys go into ``event_keys`` first, ON CONFLICT DO NOTHING: its primary key decides
    every race, as the unique index on events did. An event goes in only when its key did
    (or it has none), in the same statement: one round trip, one commit. Each row's id is
    made once (``r`` is materialized: nextval runs once per row) and carries the
    statement's day. The keys are inserted in key order (``_lock_order``'s), so two
    statements that wait on each other's keys cannot close a circle.

    Numbered placeholders, for a ``psycopg.RawCursor``: the driver sends the text as it is.
    With ``%s`` placeholders it parses the statement on every call once it has more than
    50 parameters (its cache stops there), a cost per row that shows in a profile.
    """
    values = ", ".join(_values(1 + r * _FIELDS) for r in range(rows))
    names = ", ".join(n for n, _ in _PARAMS)
    return (
        f"WITH v ({names}) AS (VALUES {values}),"
        " r AS MATERIALIZED (SELECT inbox_ledger_id('events_id_seq') AS id, v.* FROM v),"
        f" k AS (INSERT INTO event_keys ({_KEY_COLUMNS})"
        " SELECT tenant_id, source_id, key_digest, id, public_id,"
        " now() + make_interval(hours => key_hours),"  # the database's clock
        " body_sha256, response_status, response_body, sync"
        " FROM r WHERE key_digest IS NOT NULL ORDER BY tenant_id, source_id, key_digest"
        " ON CONFLICT DO NOTHING RETURNING event_id)"
        f" INSERT INTO events ({_EVENT_COLUMNS}) SELECT {_EVENT_COLUMNS} FROM r"
        " WHERE key_digest IS NULL OR id IN (SELECT event_id FROM k)"
        " RETURNING id, public_id"
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
    dict): making one per statement costs a good share of a one-row claim's CPU."""
    cur = info.get("inbox_claim_cursor")
    if cur is None or cur.closed:
        cur = info["inbox_claim_cursor"] = psycopg.RawCursor(driver)
    assert isinstance(cur, psycopg.RawCursor)
    return cur


def _lock_order(r: tuple[Any, ...]) -> tuple[Any, ...]:
    """The unique key's columns (tenant, source, key digest); keyless rows first."""
    return (r[1], r[2], r[3] or b"")


def execute(
    pooled: PoolProxiedConnection, rows: list[tuple[Any, ...]], until: float | None = None
) -> dict[str, int]:
    """The claiming INSERT for ``rows`` on ``pooled`` as it is (autocommit, or inside the
    caller's transaction), in lock order, cut at ``until`` (default: the current deadline);
    the public ids that went in, with their row ids."""
    driver = pooled.driver_connection
    assert isinstance(driver, psycopg.Connection)
    ordered = sorted(rows, key=_lock_order) if len(rows) > 1 else rows
    params = [value for r in ordered for value in r]
    cur = _cursor(driver, pooled.info)
    if until is None:
        until = current_deadline(pooled.info.get(TIMEOUT_INFO, DEFAULT_TIMEOUT_S))
    with watchdog.guard(driver, until):
        found = cur.execute(statement(len(rows)), params).fetchall()
    return {public_id: event_id for event_id, public_id in found}


@contextlib.contextmanager
def autocommit(engine: Engine, until: float) -> Iterator[PoolProxiedConnection]:
    """A connection from the engine's pool in autocommit, checked out by ``until``; back
    to the pool as it came (transactions, for everyone else)."""
    with deadline_at(until):  # the pool's checkout waits until then at most
        pooled = engine.raw_connection()
    driver = pooled.driver_connection
    assert isinstance(driver, psycopg.Connection)
    try:
        driver.autocommit = True
        try:
            yield pooled
        finally:
            if not driver.closed:
                driver.autocommit = False
    finally:
        pooled.close()  # the pool drops a connection that died


def insert(
    engine: Engine, rows: list[tuple[Any, ...]], until: float | None = None
) -> dict[str, int]:
    """Run the claiming INSERT for ``rows`` in autocommit; the public ids that went in.

    This goes to the driver directly, on a connection from the engine's pool: SQLAlchemy's
    Connection/Result machinery plus separate BEGIN and COMMIT round trips cost much of
    the receiver's CPU per event. Driver errors (psycopg.Error) reach the caller
    unwrapped; the web maps them to 503.
    """
    if until is None:
        until = current_deadline(DEFAULT_TIMEOUT_S)
    with autocommit(engine, until) as pooled:
        return execute(pooled, rows, until)


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

    __slots__ = (
        "alone",
        "error",
        "event_id",
        "key",
        "lead",
        "public_id",
        "row",
        "until",
        "wake",
    )

    def __init__(self, row: tuple[Any, ...], key: tuple[Any, ...] | None, until: float) -> None:
        self.row = row
        self.key = key
        self.until = until
        self.public_id: str = row[0]
        self.wake = threading.Lock()
        self.wake.acquire()
        self.lead = False  # woken to run the next statement
        self.alone = False  # woken to retry in a statement of its own
        self.event_id: int | None = None
        self.error: BaseException | None = None


# Runs one claiming INSERT for the rows, committed by the current deadline
# (``inbox.store.engine.deadline``); the public ids that went in.
Send = Callable[[list[tuple[Any, ...]]], dict[str, int]]


class Claims:
    """Group commit for one process's claims (one per app; thread-safe).

    ``send`` runs each statement (``insert`` on ``engine`` unless given): the queueing and
    batching here are tested against an in-memory one. ``timeout_s`` bounds a claim made
    outside any ``deadline`` (the settings' database timeout).
    """

    def __init__(
        self,
        engine: Engine | None,
        max_rows: int = MAX_ROWS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_statements: int = STATEMENTS,
        *,
        send: Send | None = None,
    ) -> None:
        if send is None:
            if engine is None:
                raise ValueError("Claims needs an engine or a send function")
            send = partial(insert, engine)
        self._send = send
        self._max_rows = max_rows
        self._timeout_s = timeout_s
        self._mutex = threading.Lock()
        self._queue: deque[_Ticket] = deque()
        self._max_out = max(1, max_statements)
        self._out = 0  # statements out, or whose successor is being woken
        self.statements = 0  # statements sent, for tests and the benchmark
        self.retries = 0  # statements sent again after a deadlock or serialization failure

    def pending(self) -> int:
        with self._mutex:
            return len(self._queue)

    def claim(self, source: Source, ev: Prepared) -> int | None:
        """The new event's row id once it is committed, or None when the key is taken."""
        key = None if ev.key_digest is None else (source.tenant_id, source.id, ev.key_digest)
        ticket = _Ticket(row(source, ev), key, current_deadline(self._timeout_s))
        with self._mutex:
            self._queue.append(ticket)
            lead = self._out < self._max_out
            if lead:
                self._out += 1
                ticket.lead = True  # no other leader takes it into a statement
        if not lead:
            if not ticket.wake.acquire(timeout=max(0.0, ticket.until - time.monotonic())):
                self._give_up(ticket)
                raise ClaimTimeout("no answer from the database within the deadline")
            lead = ticket.lead
        if lead:
            self._lead(ticket)
        if ticket.alone:
            with deadline_at(ticket.until):
                return self._send([ticket.row]).get(ticket.public_id)
        if ticket.error is not None:
            own = ticket.error if lead else _own_copy(ticket.error)
            if own is ticket.error:
                raise own
            raise own from ticket.error
        return ticket.event_id

    def _give_up(self, ticket: _Ticket) -> None:
        """``ticket``'s deadline passed while it waited. Still queued: it leaves the queue.
        In a statement: it leaves that statement's outcome behind. Made the next leader
        meanwhile: it hands the lead on, so the queue does not stall."""
        with self._mutex:
            if ticket.lead:
                successor = self._pass_lead()
            else:
                successor = None
                try:
                    self._queue.remove(ticket)
                except ValueError:
                    pass  # taken into a statement already
        if successor is not None:
            successor.wake.release()

    def _pass_lead(self) -> _Ticket | None:
        """(Under the mutex.) The oldest waiting ticket becomes a leader, to be woken by the
        caller; with none waiting, the slot is given back."""
        for ticket in self._queue:
            if not ticket.lead:
                ticket.lead = True
                return ticket
        self._out -= 1
        return None

    def _take(self, own: _Ticket) -> list[_Ticket]:
        """The leader's own ticket, then the queue's head and every later ticket whose key
        is not in the batch yet (leaving other leaders' tickets to them)."""
        batch: list[_Ticket] = [own]
        keys: set[tuple[Any, ...]] = set() if own.key is None else {own.key}
        kept: deque[_Ticket] = deque()
        with self._mutex:
            self._queue.remove(own)
            while self._queue and len(batch) < self._max_rows:
                ticket = self._queue.popleft()
                if ticket.lead or (ticket.key is not None and ticket.key in keys):
                    kept.append(ticket)
                    continue
                if ticket.key is not None:
                    keys.add(ticket.key)
                batch.append(ticket)
            self._queue.extendleft(reversed(kept))
        return batch

    def _lead(self, own: _Ticket) -> None:
        batch = self._take(own)
        try:
            self._run(batch)
        finally:
            with self._mutex:
                successor = self._pass_lead()
            if successor is not None:
                successor.wake.release()
            for ticket in batch[1:]:  # batch[0] is the leader's own
                ticket.wake.release()

    def _run(self, batch: list[_Ticket]) -> None:
        # The leader's deadline (the batch's earliest): the leader runs the statement
        # itself, and every later ticket gives up on its own when its deadline passes.
        until = min(t.until for t in batch)
        for attempt in range(1, ATTEMPTS + 1):
            self.statements += 1
            try:
                with deadline_at(until):
                    inserted = self._send([t.row for t in batch])
            except RETRIED as exc:  # deadlock / serialization: rolled back
                if attempt < ATTEMPTS and time.monotonic() < until:
                    self.retries += 1
                    log.warning("claim statement sent again after %s", type(exc).__name__)
                    continue
                self._fail(batch, exc)
                return
            except (psycopg.DataError, psycopg.IntegrityError) as exc:
                if len(batch) == 1:
                    batch[0].error = exc
                else:  # one row was refused: each retries alone, so it fails only itself
                    for ticket in batch:
                        ticket.alone = True
                return
            except Exception as exc:  # the database is down or too slow: all of them hear so
                self._fail(batch, exc)
                return
            for ticket in batch:
                ticket.event_id = inserted.get(ticket.public_id)
            return

    @staticmethod
    def _fail(batch: list[_Ticket], exc: BaseException) -> None:
        for ticket in batch:
            ticket.error = exc
