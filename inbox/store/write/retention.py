"""Pruning: apply the retention policy (``inbox.retention``) to the tables, in batches.

One round, per source:

1. **Keys.** A finished event (completed or quarantined) whose key window has passed
   loses its dedup key: its ``event_keys`` row is deleted, the key's duplicate counters
   are added to the event row and its ``key_digest`` becomes NULL, so the same key
   arriving later is a new event.
   Unfinished events (received, processing) keep their keys whatever their age, and a
   source whose key window is shorter than its provider's retry horizon keeps all its
   keys: it is reported as refused instead. And no key is ever removed before the
   provider's retry horizon has passed since receipt (an expiry stored under an older,
   shorter window is not trusted).
2. **Bodies.** A finished event received longer ago than the source's
   ``retention_days`` loses its raw body (``body`` = NULL). Everything else on the
   row stays: body hash, headers, decision, outcome, steps, audit entries. An event
   under a legal hold (``inbox.store.write.holds``) keeps its body, and its delivered
   attempts, while the hold stands; the bodies kept so are counted.
3. **Folding receipts.** Receipts are the per-copy records of something that happened
   more than once. *Folding* means keeping only their count on the parent row:
   - duplicate deliveries of an event are folded at ingest already (one counter on its
     key, with the first and last time; onto the event when the key goes), no row per copy;
   - conflicting bodies under one key are folded at ingest too: one
     ``idempotency_conflicts`` row per (event, other body hash) with a count and the
     first and last time. Those rows are small and stay with their event;
   - the attempt rows (``delivery_attempts``) of a callback delivery that ended
     ``delivered`` longer ago than the retention are deleted here. The delivery row
     keeps its attempt count, last status, last error and times; the number of
     attempt rows removed is reported as ``attempts_folded``. Failed deliveries keep
     their attempts (they are what an operator investigates).

Every statement works on at most ``batch_size`` rows and commits on its own, so a big
table is never locked for long; rows another transaction holds are skipped
(``SKIP LOCKED``) and picked up by the next round. Every time comparison uses the
database clock, or the ``now`` given (tests).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, text

from inbox.domain.retention import (
    DEFAULT_RETENTION_DAYS,
    PruneResult,
    key_window_hours,
    key_window_problem,
    ledger_days,
    retry_horizon_hours,
)
from inbox.infra.config import Settings
from inbox.store.reads.sources import list_sources
from inbox.store.schema import holds, partitions

log = logging.getLogger(__name__)

BATCH_SIZE = 1000
# A prune statement may scan far more rows than it changes; it runs in the
# background, so it gets longer than the receiver's timeout (locks still time out fast).
STATEMENT_TIMEOUT_MS = 300_000

_NOW = "coalesce(CAST(:now AS timestamptz), now())"
# A quarantined event that blocks its ordered lane (``lane_blocks``, not skipped) is not
# finished for retention: an operator is still to replay it (its body and key are needed)
# or skip it, and the events held behind it are unfinished anyway.
_FINISHED = """state IN ('completed', 'quarantined', 'filtered')
     AND NOT EXISTS (SELECT 1 FROM lane_blocks lb WHERE lb.event_id = e.id
                      AND lb.skipped_at IS NULL)"""

# A key, with its event: the event must be finished and past the retry horizon.
_EXPIRED_KEYS = f"""
    FROM event_keys k JOIN events e ON e.id = k.event_id
   WHERE k.tenant_id = :tenant_id AND k.source_id = :source_id
     AND k.expires_at <= {_NOW}
     AND e.received_at <= {_NOW} - make_interval(secs => :horizon_s)
     AND e.{_FINISHED}
"""

_OLD_BODIES_ANY = f"""
    FROM events e
   WHERE e.tenant_id = :tenant_id AND e.source_id = :source_id
     AND e.body IS NOT NULL
     AND e.received_at <= {_NOW} - make_interval(days => :days)
     AND e.{_FINISHED}
"""
# A body under a legal hold is never removed (inbox.store.write.holds); those are counted.
_OLD_BODIES = f"{_OLD_BODIES_ANY} AND NOT {holds.held('e')}"
_HELD_BODIES = f"{_OLD_BODIES_ANY} AND {holds.held('e')}"

_DELIVERED = f"""
   d.state = 'delivered' AND d.finished_at <= {_NOW} - make_interval(days => :days)
"""

# Attempts of deliveries made for one source's events ...
_SOURCE_ATTEMPTS = f"""
    FROM delivery_attempts a
    JOIN deliveries d ON d.id = a.delivery_id
    JOIN events e ON e.id = d.event_id
   WHERE e.tenant_id = :tenant_id AND e.source_id = :source_id AND {_DELIVERED}
     AND NOT {holds.held("e")}
"""

# ... and of deliveries that belong to no event (they get the default retention).
_ORPHAN_ATTEMPTS = f"""
    FROM delivery_attempts a
    JOIN deliveries d ON d.id = a.delivery_id
   WHERE d.event_id IS NULL AND {_DELIVERED}
     AND NOT EXISTS (SELECT 1 FROM legal_holds h WHERE h.released_at IS NULL
                      AND h.scope = 'tenant' AND h.tenant_id = d.tenant_id)
"""


def _batched_update(rows: str, assignments: str) -> str:
    # Lock at most :limit matching rows (skipping any another transaction holds),
    # then change exactly those. FOR UPDATE re-checks the WHERE clause against a row
    # that changed meanwhile, so an event replayed in between is left alone.
    return f"""
        WITH batch AS (SELECT id {rows} LIMIT :limit FOR UPDATE SKIP LOCKED)
        UPDATE events e SET {assignments} FROM batch WHERE e.id = batch.id
    """


# Expired keys go (a batched DELETE of event_keys); each one's final duplicate counters
# are added to its event, which also forgets the key's digest: the same key arriving later
# is a new event. Off the hot path: the receiver only ever touches the key.
_REMOVE_KEYS = f"""
    WITH batch AS (
        SELECT k.tenant_id, k.source_id, k.key_digest {_EXPIRED_KEYS}
         LIMIT :limit FOR UPDATE OF k, e SKIP LOCKED
    ), gone AS (
        DELETE FROM event_keys d USING batch b
         WHERE d.tenant_id = b.tenant_id AND d.source_id = b.source_id
           AND d.key_digest = b.key_digest
        RETURNING d.event_id, d.duplicate_count, d.first_duplicate_at, d.last_duplicate_at
    )
    UPDATE events e
       SET key_digest = NULL,
           duplicate_count = e.duplicate_count + g.duplicate_count,
           first_duplicate_at = coalesce(e.first_duplicate_at, g.first_duplicate_at),
           last_duplicate_at = greatest(e.last_duplicate_at, g.last_duplicate_at)
      FROM gone g WHERE e.id = g.event_id
"""
_REMOVE_BODIES = _batched_update(_OLD_BODIES, "body = NULL")


def _batched_delete(rows: str) -> str:
    # Attempt rows of a delivered delivery are never written again, so no lock is needed
    # to pick them; the DELETE itself locks only the batch.
    return f"""
        WITH batch AS (SELECT a.delivery_id, a.id {rows} LIMIT :limit)
        DELETE FROM delivery_attempts t USING batch
         WHERE t.delivery_id = batch.delivery_id AND t.id = batch.id
    """


@contextmanager
def _transaction(engine: Engine) -> Iterator[Connection]:
    with engine.begin() as conn:
        conn.execute(
            text("SELECT set_config('statement_timeout', :ms, true)"),
            {"ms": str(STATEMENT_TIMEOUT_MS)},
        )
        yield conn


def _apply(
    engine: Engine,
    rows: str,
    change: str,
    params: dict[str, Any],
    dry_run: bool,
    batch_size: int,
) -> int:
    """Count the matching rows (dry run), or change them a batch per transaction."""
    if dry_run:
        with _transaction(engine) as conn:
            return int(conn.execute(text(f"SELECT count(*) {rows}"), params).scalar_one())
    total = 0
    while True:
        with _transaction(engine) as conn:
            done = conn.execute(text(change), {**params, "limit": batch_size}).rowcount
        total += done
        if done < batch_size:
            return total


def prune_once(
    engine: Engine,
    settings: Settings,
    now: datetime | None = None,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
) -> PruneResult:
    """One pruning round over every source, then over the ledger's days; returns what was
    removed (or would be)."""
    with engine.begin() as conn:
        all_sources = list_sources(conn)
    result = PruneResult(dry_run=dry_run)
    for src in all_sources:
        params: dict[str, Any] = {
            "tenant_id": src.tenant_id,
            "source_id": src.id,
            "now": now,
            "days": src.options.retention_days,
            "horizon_s": retry_horizon_hours(src.scheme) * 3600,
        }
        window = key_window_hours(src.scheme, src.options.key_ttl_hours, settings.key_ttl_hours)
        problem = key_window_problem(src.scheme, window)
        if problem is None:
            result.keys_removed += _apply(
                engine, _EXPIRED_KEYS, _REMOVE_KEYS, params, dry_run, batch_size
            )
        else:
            result.refused_sources.append(f"{src.tenant}/{src.name}: {problem}")
            log.warning("prune: keys of %s/%s kept: %s", src.tenant, src.name, problem)
        result.bodies_removed += _apply(
            engine, _OLD_BODIES, _REMOVE_BODIES, params, dry_run, batch_size
        )
        result.bodies_held += _apply(engine, _HELD_BODIES, "", params, True, batch_size)
        result.attempts_folded += _apply(
            engine,
            _SOURCE_ATTEMPTS,
            _batched_delete(_SOURCE_ATTEMPTS),
            params,
            dry_run,
            batch_size,
        )
    result.attempts_folded += _apply(
        engine,
        _ORPHAN_ATTEMPTS,
        _batched_delete(_ORPHAN_ATTEMPTS),
        {"now": now, "days": DEFAULT_RETENTION_DAYS},
        dry_run,
        batch_size,
    )
    _retire_days(engine, settings, all_sources, result, now)
    log.info(
        "prune%s: %d keys, %d bodies (%d kept under legal hold), %d delivery attempts folded,"
        " %d sources refused",
        " (dry run)" if dry_run else "",
        result.keys_removed,
        result.bodies_removed,
        result.bodies_held,
        result.attempts_folded,
        len(result.refused_sources),
    )
    return result


def ledger_window(settings: Settings, all_sources: list[Any]) -> tuple[int, str | None]:
    """The ledger window in days (the setting, stretched to the longest key window or
    retry horizon in use), and why it was stretched (None: it was not)."""
    longest = float(settings.key_ttl_hours)
    for src in all_sources:
        window = key_window_hours(src.scheme, src.options.key_ttl_hours, settings.key_ttl_hours)
        longest = max(longest, float(window), retry_horizon_hours(src.scheme))
    return ledger_days(settings.ledger_retention_days, longest)


def _retire_days(
    engine: Engine,
    settings: Settings,
    all_sources: list[Any],
    result: PruneResult,
    now: datetime | None,
) -> None:
    """4. **Days.** Whole days of the ledger past the ledger window go, partition by
    partition (``inbox.store.schema.partitions.retire``), unless something keeps them; the
    window is never shorter than the longest key window (or retry horizon) in use."""
    days, note = ledger_window(settings, all_sources)
    if note is not None:
        log.warning("prune: %s", note)
    result.ledger_window_note = note
    retired = partitions.retire(engine, days, now=now, dry_run=result.dry_run)
    result.days_dropped = [str(d) for d in retired.dropped]
    result.days_kept = [f"{d}: {why}" for d, why in retired.kept]
