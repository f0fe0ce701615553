"""The console's read model, part two (part one is ``inbox.store.reads.reads``): an event's
attempt and quarantine history, search by id or key, failed callbacks per event, and
what became of the items a bulk replay moved.

Every query takes ``scope`` (a tenant id, or None for every tenant); rows are frozen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text

from inbox.domain.idempotency import key_digest
from inbox.store.reads.ledger_reads import bounds_params, by_public_id, since_event

_SCOPED = "(CAST(:scope AS bigint) IS NULL OR {col} = :scope)"


@dataclass(frozen=True, slots=True)
class Attempt:
    at: datetime
    attempt: int
    step: str | None
    error_class: str
    error_message: str | None
    traceback: str | None
    outcome: str  # retry | quarantined


def attempts(conn: Connection, event_id: int) -> list[Attempt]:
    """Every failed run of the event, oldest first, across replays."""
    rows = conn.execute(
        text(
            "SELECT at, attempt, step, error_class, error_message, traceback, outcome"
            " FROM event_attempts WHERE event_id = :id ORDER BY id"
        ),
        {"id": event_id},
    )
    return [Attempt(**r._mapping) for r in rows]


@dataclass(frozen=True, slots=True)
class Hit:
    kind: str  # event | delivery
    public_id: str
    tenant: str
    where: str  # the source (events) or the endpoint's URL (deliveries)
    state: str
    event_type: str | None
    at: datetime
    matched: str  # what matched: "event id", "delivery id", "key"


_BY_ID = f"""
SELECT 'event' AS kind, e.public_id, t.name AS tenant, s.name AS "where", e.state,
       e.event_type, e.received_at AS at, 'event id' AS matched
  FROM events e JOIN tenants t ON t.id = e.tenant_id JOIN sources s ON s.id = e.source_id
 WHERE {by_public_id("e", "q")} AND {_SCOPED.format(col="e.tenant_id")}
UNION ALL
SELECT 'delivery', d.public_id, t.name, ep.url, d.state, d.event_type, d.created_at,
       'delivery id'
  FROM deliveries d JOIN endpoints ep ON ep.id = d.endpoint_id JOIN tenants t ON t.id = d.tenant_id
 WHERE d.public_id = :q AND {_SCOPED.format(col="d.tenant_id")}
"""

# A trace id (inbox.infra.tracing): the partial index on events.trace_id.
_BY_TRACE = f"""
SELECT 'event' AS kind, e.public_id, t.name AS tenant, s.name AS "where", e.state,
       e.event_type, e.received_at AS at, 'trace id' AS matched
  FROM events e JOIN tenants t ON t.id = e.tenant_id JOIN sources s ON s.id = e.source_id
 WHERE e.trace_id = :trace_id AND e.trace_id IS NOT NULL AND {_SCOPED.format(col="e.tenant_id")}
"""
_TRACE_ID = re.compile(r"[0-9a-f]{32}")

_BY_KEY = f"""
SELECT 'event' AS kind, e.public_id, t.name AS tenant, s.name AS "where", e.state,
       e.event_type, e.received_at AS at, 'idempotency key or provider event id' AS matched
  FROM event_keys k JOIN events e ON e.id = k.event_id
  JOIN tenants t ON t.id = e.tenant_id JOIN sources s ON s.id = e.source_id
 WHERE (k.tenant_id, k.source_id, k.key_digest) IN (
        SELECT * FROM unnest(CAST(:tenants AS bigint[]), CAST(:sources AS bigint[]),
                             CAST(:digests AS bytea[])))
   AND {_SCOPED.format(col="e.tenant_id")}
"""


def search(conn: Connection, q: str, scope: int | None) -> list[Hit]:
    """Events and deliveries by public id, events by trace id, then by key, newest first.

    A key (an Idempotency-Key, or the provider's event id a source dedups on) is
    never stored: its digest over (tenant, source, key) is, so the query computes
    the digest for each source in scope and looks each one up in the dedup index.
    Keys are kept only for their dedup window, so an old key finds nothing.
    """
    q = q.strip()
    if not q:
        return []
    params = {**bounds_params(q, "q"), "scope": scope}
    hits = [Hit(**r._mapping) for r in conn.execute(text(_BY_ID), params)]
    if _TRACE_ID.fullmatch(q.lower()):
        traced = conn.execute(text(_BY_TRACE), {"trace_id": q.lower(), "scope": scope})
        hits += [Hit(**r._mapping) for r in traced]
    srcs = conn.execute(
        text(f"SELECT id, tenant_id FROM sources s WHERE {_SCOPED.format(col='s.tenant_id')}"),
        {"scope": scope},
    ).fetchall()
    if srcs:
        keyed = conn.execute(
            text(_BY_KEY),
            {
                "scope": scope,
                "tenants": [s.tenant_id for s in srcs],
                "sources": [s.id for s in srcs],
                "digests": [key_digest(s.tenant_id, s.id, q) for s in srcs],
            },
        )
        seen = {h.public_id for h in hits}
        hits += [h for r in keyed if (h := Hit(**r._mapping)).public_id not in seen]
    return sorted(hits, key=lambda h: h.at, reverse=True)


def failed_callbacks(conn: Connection, event_ids: list[int]) -> dict[int, int]:
    """event id → how many of its deliveries are dead (failed), for those with any."""
    if not event_ids:
        return {}
    rows = conn.execute(
        text(
            "SELECT event_id, count(*) AS n FROM deliveries"
            " WHERE event_id = ANY(CAST(:ids AS bigint[])) AND state = 'failed'"
            " AND id >= :lo GROUP BY event_id"
        ),
        # no delivery is older than its event: days before the oldest event are skipped
        {"ids": event_ids, "lo": min(since_event(i) for i in event_ids)},
    )
    return {int(r.event_id): int(r.n) for r in rows}


@dataclass(frozen=True, slots=True)
class Outcomes:
    """What the items a bulk replay moved are doing now."""

    succeeded: int  # events completed / deliveries delivered
    dead_again: int  # quarantined / failed again
    pending: int  # back in the inbox or the outbox, not finished yet
    gone: int  # deleted since (retention)


_OUTCOMES = {
    "events": """
        SELECT count(*) FILTER (WHERE e.state = 'completed') AS succeeded,
               count(*) FILTER (WHERE e.state = 'quarantined') AS dead_again,
               count(*) FILTER (WHERE e.state IN ('received', 'processing')) AS pending,
               count(*) FILTER (WHERE e.id IS NULL) AS gone
          FROM bulk_replay_items i LEFT JOIN events e ON e.id = i.subject_id
         WHERE i.job_id = :job AND i.outcome = 'moved'
    """,
    "deliveries": """
        SELECT count(*) FILTER (WHERE d.state = 'delivered') AS succeeded,
               count(*) FILTER (WHERE d.state = 'failed') AS dead_again,
               count(*) FILTER (WHERE d.state IN ('pending', 'sending')) AS pending,
               count(*) FILTER (WHERE d.id IS NULL) AS gone
          FROM bulk_replay_items i LEFT JOIN deliveries d ON d.id = i.subject_id
         WHERE i.job_id = :job AND i.outcome = 'moved'
    """,
}


def replay_outcomes(conn: Connection, job_id: int, kind: str) -> Outcomes:
    row = conn.execute(text(_OUTCOMES[kind]), {"job": job_id}).one()
    return Outcomes(int(row.succeeded), int(row.dead_again), int(row.pending), int(row.gone))
