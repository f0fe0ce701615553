"""The one ingest transaction: claim the key, or answer as the first delivery was answered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.dialects.postgresql import insert

from inbox.domain.intake import Prepared
from inbox.domain.outcomes import IngestOutcome
from inbox.domain.records import EventId, Source
from inbox.domain.states import FINISHED
from inbox.infra.envelope import tagged_key
from inbox.store.db import sealing
from inbox.store.db.claims import Claimed, Copy, autocommit, execute, row
from inbox.store.db.engine import alone, deadline_at, watchdog
from inbox.store.schema.tables import event_keys, idempotency_conflicts


@dataclass(frozen=True)
class IngestResult:
    outcome: IngestOutcome
    event_id: EventId
    public_id: str
    status: int
    body: bytes


def _accepted(event_id: EventId, ev: Prepared) -> IngestResult:
    return IngestResult(
        IngestOutcome.ACCEPTED, event_id, ev.public_id, ev.response_status, ev.response_body
    )


def _claimed(got: Claimed | None, ev: Prepared) -> IngestResult | None:
    if got is None:
        return None
    if isinstance(got, Copy):
        return IngestResult(
            IngestOutcome.DUPLICATE, got.event_id, got.public_id, got.status, got.body
        )
    return _accepted(got, ev)


class Claims(Protocol):
    """``inbox.store.db.group_commit.Claims``, or anything that claims as it does."""

    def claim(self, source: Source, ev: Prepared) -> Claimed | None: ...


def claim(claims: Claims, source: Source, ev: Prepared) -> IngestResult | None:
    """The claiming statement alone, in autocommit (see ``claims``): accepted, or a copy
    of an earlier delivery answered as that one was (counted before the answer).

    When another transaction holds the same key uncommitted, PostgreSQL waits for it to
    finish before deciding, so exactly one of any number of racing copies inserts.
    None means the key is taken otherwise (another body, a synchronous source): the
    caller answers in ``ingest``'s transaction.
    """
    return _claimed(claims.claim(source, ev), ev)


def _claim_in(conn: Connection, source: Source, ev: Prepared) -> IngestResult | None:
    """The claim inside the caller's transaction (the duplicate path's retry)."""
    return _claimed(execute(conn.connection, [row(source, ev)]).get(ev.public_id), ev)


# A duplicate: count it on its key (no row per copy) and read back what the first
# delivery was answered, from the key alone: one small HOT update of event_keys (no
# indexed column changes, fillfactor leaves room on the page), ``events`` untouched.
# Only a synchronous source's copy reads its event (by id: one partition), for its state
# and for the answer, which the decision replaces once the event completes. The body-hash
# test decides duplicate vs conflict in the same statement, so no second round trip is
# needed for the common case.
# In the driver's own placeholders: ``replay`` sends it on the driver directly.
_DUPLICATE = (
    """
    WITH k AS (
        UPDATE event_keys
           SET duplicate_count = duplicate_count + 1,
               first_duplicate_at = coalesce(first_duplicate_at, now()),
               last_duplicate_at = now()
         WHERE tenant_id = %(tenant_id)s AND source_id = %(source_id)s
           AND key_digest = %(key_digest)s AND body_sha256 = %(body_sha256)s
        RETURNING event_id, public_id, response_status, response_body, sync
    )
    SELECT k.event_id, k.public_id, coalesce(e.response_status, k.response_status),
           coalesce(e.response_body, k.response_body), k.sync, e.state, e.key_live
      FROM k LEFT JOIN LATERAL (
            -- OFFSET 0 keeps this a subquery of its own: k.sync gates it (a one-time
            -- filter), so a copy for an asynchronous source never reads events at all.
            -- key_live: whether its answer's key is live (sealing.live), for an erasure.
            SELECT state, response_status, response_body, """
    + sealing.live("e")
    + """ AS key_live FROM events e
             WHERE k.sync AND e.id = k.event_id OFFSET 0) e ON true
    """
)


def _duplicate_params(source: Source, ev: Prepared) -> dict[str, Any]:
    return {
        "tenant_id": source.tenant_id,
        "source_id": source.id,
        "key_digest": ev.key_digest,
        "body_sha256": ev.match_sha256 or ev.body_sha256,
    }


def _as_duplicate(engine: Engine, dup: Any) -> IngestResult:
    """The answer to a copy of the first delivery (``_DUPLICATE``'s row); a synchronous
    answer opened where it is sealed (empty once its key was erased)."""
    event_id, public_id, status, body, sync, state, live = dup
    if sync and state not in FINISHED:
        return IngestResult(IngestOutcome.IN_FLIGHT, event_id, public_id, 409, b"")
    answer = bytes(body)
    if tagged_key(answer) is not None:
        answer = sealing.for_engine(engine).open_tagged(answer, sealing.RESPONSE, live) or b""
    return IngestResult(IngestOutcome.DUPLICATE, event_id, public_id, status, answer)


def replay(engine: Engine, source: Source, ev: Prepared, until: float) -> IngestResult | None:
    """A taken key the claim left alone: a synchronous source's copy, in one round trip
    (``_DUPLICATE`` alone in autocommit, on the driver, counted and committed before the
    answer). None: another body, or the key was pruned; ``ingest`` decides. (A plain
    copy never gets here: the claim statement answers it.)"""
    with autocommit(engine, until) as pooled:
        driver = pooled.driver_connection
        assert isinstance(driver, psycopg.Connection)
        params = _duplicate_params(source, ev)
        with watchdog.guard(driver, until):
            dup = alone(driver, pooled.info, lambda: driver.execute(_DUPLICATE, params).fetchone())
    return None if dup is None else _as_duplicate(engine, dup)


def _conflict(conn: Connection, source: Source, ev: Prepared) -> IngestResult | None:
    original = conn.execute(
        select(event_keys.c.event_id.label("id"), event_keys.c.public_id).where(
            event_keys.c.tenant_id == source.tenant_id,
            event_keys.c.source_id == source.id,
            event_keys.c.key_digest == ev.key_digest,
        )
    ).first()
    if original is None:
        return None  # the key was pruned in between: the caller claims it afresh
    stmt = insert(idempotency_conflicts).values(
        event_id=original.id, other_body_sha256=ev.body_sha256
    )
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["event_id", "other_body_sha256"],
            set_={"count": idempotency_conflicts.c.count + 1, "last_at": func.now()},
        )
    )
    return IngestResult(IngestOutcome.CONFLICT, original.id, original.public_id, 422, b"")


def ingest(conn: Connection, source: Source, ev: Prepared) -> IngestResult:
    """Answer a request whose key ``claim`` found taken: a duplicate or a conflict.

    Run inside one transaction; the caller commits, then answers. If the key was pruned
    in between, the next round claims it afresh.
    """
    for round_ in range(3):
        if round_ > 0:
            claimed = _claim_in(conn, source, ev)
            if claimed is not None:
                return claimed
        dup = conn.exec_driver_sql(_DUPLICATE, _duplicate_params(source, ev)).first()
        if dup is not None:
            return _as_duplicate(conn.engine, dup)
        conflict = _conflict(conn, source, ev)
        if conflict is not None:
            return conflict
    raise RuntimeError("the idempotency key kept changing hands")  # pragma: no cover


def taken(engine: Engine, source: Source, ev: Prepared, until: float) -> IngestResult:
    """The answer to a request whose key ``claim`` found taken otherwise: a synchronous
    source's copy in one statement (``replay``), else (another body, a pruned key) the
    duplicate path's transaction (``ingest``). Each takes one row lock at most (the
    original's), so neither should deadlock; one attempt, whatever happens: the caller
    owns the retry (``inbox.services.intake``)."""
    replayed = replay(engine, source, ev, until)
    if replayed is not None:
        return replayed
    with deadline_at(until), engine.begin() as conn:
        return ingest(conn, source, ev)
