"""The claiming INSERT: the key and the event in one statement, in autocommit.

A claim is one statement in autocommit: the key into ``event_keys``, and the event only
where the key went in (``statement``); an id back means the request owns its key and the
row is committed, so 2xx may be sent. A copy of an earlier delivery (same key, same body)
is counted and answered in the same statement: a ``Copy``, also committed. One statement
may carry many requests' rows: ``inbox.store.db.group_commit`` batches a process's
concurrent claims into it.

One lock order: every statement carries its rows sorted by key. A row whose key another
statement has inserted but not yet committed waits for that statement; two statements
(of two processes) that took two keys in opposite orders would wait on each other until
PostgreSQL's deadlock detector killed one, and every request it carried would hear 503.
Sorted, a statement only ever waits on keys above all those it holds, so no wait can
close a circle. A deadlock or serialization failure that happens anyway rolls the
statement back whole; the receiver's service sends each claim again, a few times within
its deadline (``inbox.services.intake``: the one retry loop).

Every wait ends by the request's deadline (``inbox.store.db.engine.deadline``, else the
settings' database timeout from now): at the pool and in the statement (and in the group
commit's queue). A claim that runs out of time raises ``ClaimTimeout`` (503): its row may
still commit, which is safe, as the sender's retry is then answered as a duplicate; a 2xx
is only ever sent for a row that has committed.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import psycopg
from psycopg.errors import DeadlockDetected, SerializationFailure
from sqlalchemy import Engine
from sqlalchemy.pool import PoolProxiedConnection

from inbox.domain import ledger
from inbox.domain.errors import StoreUnavailable
from inbox.domain.intake import Prepared
from inbox.domain.lanes import PARKED_UNTIL
from inbox.domain.records import EventId, Source
from inbox.infra import tracing
from inbox.store.db import lane_sql
from inbox.store.db.engine import (
    DEFAULT_TIMEOUT_S,
    TIMEOUT_INFO,
    alone,
    current_deadline,
    deadline_at,
    watchdog,
)

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
    ("lane_position", "numeric"),
    ("content_type", "text"),
    ("body", "bytea"),
    ("body_sha256", "bytea"),
    ("match_sha256", "bytea"),
    ("headers", "jsonb"),
    ("key_id", "bigint"),
    ("headers_sealed", "bytea"),
    ("response_status", "integer"),
    ("response_body", "bytea"),
    ("sync", "boolean"),
    ("max_attempts", "integer"),
    ("trace_id", "text"),
    ("trace_context", "text"),
    ("verification", "jsonb"),
    ("state", "text"),
    ("filter_reason", "text"),
)
_EVENT_COLUMNS = ", ".join(
    ["id", "key_digest"]
    + [n for n, _ in _PARAMS if n not in ("key_hours", "key_digest", "match_sha256")]
)
_KEY_COLUMNS = """tenant_id, source_id, key_digest, event_id, public_id, expires_at,
    body_sha256, response_status, response_body, sync"""

_FIELDS = len(_PARAMS)  # parameters per row, in ``row``'s order
MAX_ROWS = 64  # per statement; a process rarely has more threads than this
# What PostgreSQL rolls back whole and a second attempt may pass (SQLSTATE 40P01, 40001).
RETRIED = (DeadlockDetected, SerializationFailure)


class ClaimTimeout(StoreUnavailable):
    """The claim could not be decided by the request's deadline (the web answers 503)."""


@dataclass(frozen=True)
class Copy:
    """A claim whose key an earlier delivery with the same body holds: that event, and
    the answer its first delivery was given (this copy is counted on the key)."""

    event_id: EventId
    public_id: str
    status: int
    body: bytes


Claimed = EventId | Copy  # the new event's row id, or the copy's answer


def _values(first: int) -> str:
    """One row's VALUES item, with PostgreSQL's own numbered placeholders from ``first``."""
    p = [f"CAST(${first + i} AS {t})" for i, (_, t) in enumerate(_PARAMS)]
    return "(" + ", ".join(p) + ")"


# Where an event of an ordered lane starts: parked (never due until the transaction that
# finishes its predecessor makes it so, ``inbox.store.write.queue.advance``) when an
# unfinished event of its lane, or its lane's unskipped blocker, stands before it and this
# statement could take a share lock on that row. The lock is what makes parking safe: the
# UPDATE that finishes the predecessor waits for this statement's commit, so the statement
# after it, which advances the lane, sees the parked row. A predecessor being written right
# now (locked) is skipped: the event is then stored due, and the claim's own lane checks
# hold it, as they hold every event. The predecessor is looked for from the day before
# yesterday (constants in the text, so each plan names those days alone;
# ``inbox.store.db.days``): an event behind an older one is stored due, which costs the
# claim a look, never the order.
_PARKED = (
    "CASE WHEN r.ordering_key IS NOT NULL AND r.filter_reason IS NULL AND ("
    "EXISTS (" + lane_sql.earlier("p", "r", lock="FOR SHARE OF p SKIP LOCKED") + ")"
    " OR EXISTS (SELECT 1 FROM lane_blocks b WHERE b.tenant_id = r.tenant_id"
    " AND b.lane = r.ordering_key AND b.skipped_at IS NULL FOR SHARE SKIP LOCKED))"
    f" THEN CAST('{PARKED_UNTIL}' AS timestamptz) ELSE now() END"
)


def _parked(day: int) -> str:
    """The parked-or-due CASE for a statement run on ``day`` (days since the epoch)."""
    return _PARKED.format(lo=(day - 2) << ledger.DAY_SHIFT, hi=(day + 2) << ledger.DAY_SHIFT)


def today() -> int:
    """The day number the intake statement's text is made for (this process's clock)."""
    return int(time.time() // 86400)


@lru_cache(maxsize=2 * MAX_ROWS)
def statement(rows: int, day: int) -> str:
    """The claiming statement for this many rows, run on ``day`` (``today``: the days the
    parking lookup names, ``_PARKED``); it says which events went in and answers each copy
    of an earlier delivery.

    The keys go into ``event_keys`` first: its primary key decides every race, as the
    unique index on events did. An event goes in only when its key did (or it has none),
    in the same statement: one round trip, one commit. Each row's id is made once (``r``
    is materialized: nextval runs once per row) and carries the statement's day. The keys
    are inserted in key order (``_lock_order``'s), so two statements that wait on each
    other's keys cannot close a circle.

    The key row keeps the body's match digest (``Prepared.match_sha256``: the raw body's
    SHA-256 unless the provider restamps fields between retries), the event the SHA-256 of
    the raw bytes. A key that is taken, by a delivery with the same match digest of an
    asynchronous source, is a copy: ON CONFLICT counts it on its key (one HOT update: no
    indexed column changes) and the statement returns the first delivery's answer, so a
    retry storm costs one round trip per copy, as a first delivery does. Any other taken
    key (another body: a conflict; a synchronous source, whose answer is the decision)
    comes back with no row: ``inbox.store.write.intake`` decides it in a transaction of its
    own. The conflicting key row is locked either way (as ``UPDATE`` would), in the same
    key order.

    Numbered placeholders, for a ``psycopg.RawCursor``: the driver sends the text as it is.
    With ``%s`` placeholders it parses the statement on every call once it has more than
    50 parameters (its cache stops there), a cost per row that shows in a profile.
    """
    values = ", ".join(_values(1 + r * _FIELDS) for r in range(rows))
    names = ", ".join(n for n, _ in _PARAMS)
    return (
        f"WITH v ({names}) AS (VALUES {values}),"
        " r AS MATERIALIZED (SELECT inbox_ledger_id('events_id_seq') AS id, v.* FROM v),"
        f" k AS (INSERT INTO event_keys AS old ({_KEY_COLUMNS})"
        " SELECT tenant_id, source_id, key_digest, id, public_id,"
        " now() + make_interval(hours => key_hours),"  # the database's clock
        " match_sha256, response_status, response_body, sync"
        " FROM r WHERE key_digest IS NOT NULL ORDER BY tenant_id, source_id, key_digest"
        " ON CONFLICT (tenant_id, source_id, key_digest) DO UPDATE"
        " SET duplicate_count = old.duplicate_count + 1,"
        " first_duplicate_at = coalesce(old.first_duplicate_at, now()),"
        " last_duplicate_at = now()"
        " WHERE old.body_sha256 = EXCLUDED.body_sha256 AND NOT old.sync"
        " RETURNING tenant_id, source_id, key_digest, event_id, public_id,"
        " response_status, response_body),"
        f" e AS (INSERT INTO events ({_EVENT_COLUMNS}, finished_at, available_at)"
        f" SELECT {_EVENT_COLUMNS},"
        " CASE WHEN filter_reason IS NOT NULL THEN now() END,"
        f" {_parked(day)} FROM r"
        " WHERE key_digest IS NULL OR id IN (SELECT event_id FROM k)"
        " RETURNING id, public_id)"
        " SELECT public_id, id, NULL::text, NULL::integer, NULL::bytea FROM e"
        " UNION ALL"
        " SELECT r.public_id, k.event_id, k.public_id, k.response_status, k.response_body"
        " FROM k JOIN r USING (tenant_id, source_id, key_digest) WHERE k.event_id <> r.id"
    )


def lane_of(source: Source, ev: Prepared) -> bytes | None:
    """The event's lane (``events.ordering_key``): none unless its source is ordered; its
    lane key's digest when the source names one (``lane_key``, ``lane_key_paths``), else
    its business key's."""
    opts = source.options
    if not opts.serialize_by_business_key:
        return None
    if opts.lane_key or opts.lane_key_paths:
        return ev.lane_digest
    return ev.business_key_digest


def row(source: Source, ev: Prepared) -> tuple[Any, ...]:
    """One event's parameters, in ``_COLUMNS``' order, with the current span's context
    (the claim's, see ``inbox.infra.tracing``; None while tracing is off). ``ev`` as the
    caller sealed it (``inbox.store.db.sealing``) or in clear."""
    trace_context = tracing.traceparent()
    return (
        ev.public_id,
        source.tenant_id,
        source.id,
        ev.key_digest,
        None if ev.key_digest is None else ev.key_expires_hours,
        ev.event_type,
        ev.business_key_digest,
        lane_of(source, ev),
        ev.lane_position if source.options.serialize_by_business_key else 0,
        ev.content_type,
        ev.body,
        ev.body_sha256,
        ev.match_sha256 or ev.body_sha256,
        json.dumps(ev.headers),
        ev.key_id,
        ev.headers_sealed,
        ev.response_status,
        ev.response_body,
        ev.wait_seconds is not None,
        source.options.max_attempts,
        tracing.trace_id_of(trace_context),
        trace_context,
        None if ev.verification is None else json.dumps(ev.verification),
        "received" if ev.filter_reason is None else "filtered",
        ev.filter_reason,
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
) -> dict[str, Claimed]:
    """The claiming INSERT for ``rows`` on ``pooled`` as it is (autocommit, or inside the
    caller's transaction), in lock order, cut at ``until`` (default: the current deadline);
    by each row's public id, the row id it went in with, or the ``Copy`` it turned out to
    be. A row missing from the answer found its key taken otherwise (see ``statement``)."""
    driver = pooled.driver_connection
    assert isinstance(driver, psycopg.Connection)
    return execute_on(driver, pooled.info, rows, until)


def execute_on(
    driver: psycopg.Connection[Any],
    info: dict[Any, Any],
    rows: list[tuple[Any, ...]],
    until: float | None = None,
) -> dict[str, Claimed]:
    """``execute`` on a driver connection and its info dict (``claim_connections``)."""
    ordered = sorted(rows, key=_lock_order) if len(rows) > 1 else rows
    params = [value for r in ordered for value in r]
    cur = _cursor(driver, info)
    if until is None:
        until = current_deadline(info.get(TIMEOUT_INFO, DEFAULT_TIMEOUT_S))
    with watchdog.guard(driver, until):
        text = statement(len(rows), today())
        found = alone(driver, info, lambda: cur.execute(text, params).fetchall())
    return {
        mine: event_id if first is None else Copy(event_id, first, status, bytes(body))
        for mine, event_id, first, status, body in found
    }


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
