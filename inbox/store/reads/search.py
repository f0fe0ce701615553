"""Search across events and deliveries: by public id, by trace id, by key."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text

from inbox.domain.idempotency import key_digest
from inbox.domain.states import DeliveryState, EventState
from inbox.store.reads.ledger_reads import bounds_params, by_public_id
from inbox.store.reads.scope import Scope, scoped


@dataclass(frozen=True, slots=True)
class Hit:
    kind: str  # event | delivery
    public_id: str
    tenant: str
    where: str  # the source (events) or the endpoint's URL (deliveries)
    state: EventState | DeliveryState
    event_type: str | None
    at: datetime
    matched: str  # what matched: "event id", "delivery id", "key"

    def __post_init__(self) -> None:  # the column's text, as the enum of its kind
        kind = EventState if self.kind == "event" else DeliveryState
        object.__setattr__(self, "state", kind(self.state))


_BY_ID = f"""
SELECT 'event' AS kind, e.public_id, t.name AS tenant, s.name AS "where", e.state,
       e.event_type, e.received_at AS at, 'event id' AS matched
  FROM events e JOIN tenants t ON t.id = e.tenant_id JOIN sources s ON s.id = e.source_id
 WHERE {by_public_id("e", "q")} AND {scoped("e.tenant_id")}
UNION ALL
SELECT 'delivery', d.public_id, t.name, ep.url, d.state, d.event_type, d.created_at,
       'delivery id'
  FROM deliveries d JOIN endpoints ep ON ep.id = d.endpoint_id JOIN tenants t ON t.id = d.tenant_id
 WHERE d.public_id = :q AND {scoped("d.tenant_id")}
"""

# A trace id (inbox.infra.tracing): the partial index on events.trace_id.
_BY_TRACE = f"""
SELECT 'event' AS kind, e.public_id, t.name AS tenant, s.name AS "where", e.state,
       e.event_type, e.received_at AS at, 'trace id' AS matched
  FROM events e JOIN tenants t ON t.id = e.tenant_id JOIN sources s ON s.id = e.source_id
 WHERE e.trace_id = :trace_id AND e.trace_id IS NOT NULL AND {scoped("e.tenant_id")}
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
   AND {scoped("e.tenant_id")}
"""


def search(conn: Connection, q: str, scope: Scope) -> list[Hit]:
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
        text(f"SELECT id, tenant_id FROM sources s WHERE {scoped('s.tenant_id')}"),
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
