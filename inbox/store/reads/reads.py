"""The console's read model: endpoint health, sources, dead-letter groups, search,
an event's attempt history and what became of a bulk replay's items.

Every query takes ``scope``: the tenant id a token is limited to, or None for every
tenant; rows outside it are never returned. Rows are frozen dataclasses. Secrets are
only ever counted here, never selected.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, Row, text

from inbox.domain.endpoint_health import Recent, state_of
from inbox.store.reads.detail import AuditEntry
from inbox.store.reads.endpoint_health import RECENT

HEALTH_HOURS = 24
R = TypeVar("R")
_SCOPED = "(CAST(:scope AS bigint) IS NULL OR {col} = :scope)"


def _rows(cls: type[R], result: Iterable[Row[Any]]) -> list[R]:
    """Each row as ``cls``, from the columns it names."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return [cls(**{k: v for k, v in r._mapping.items() if k in names}) for r in result]


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    id: int
    public_id: str
    tenant: str
    url: str
    event_types: list[str] | None
    enabled: bool
    disabled_reason: str | None
    failing: bool
    max_attempts: int
    timeout_ms: int
    max_in_flight: int
    retry_schedule: list[int]
    created_at: datetime
    active_secrets: int
    attempts: int  # in the last HEALTH_HOURS
    succeeded: int
    avg_ms: float | None
    p95_ms: float | None
    pending: int
    held: int  # paused or disabled: kept until it is enabled (or discarded)
    failed: int
    last_ok_at: datetime | None
    last_error_at: datetime | None
    last_error_status: int | None
    last_error_class: str | None
    last_error_excerpt: str | None
    paused: bool = False
    rate_per_second: float | None = None  # its rate limit, across every courier
    circuit: str = "closed"  # its breaker: closed, open or half_open (inbox.domain.circuit)
    recent_attempts: int = 0  # in the last endpoint_health.WINDOW_MINUTES
    recent_failures: int = 0
    ordered: bool = False  # one in flight, in the order made
    deleted_at: datetime | None = None  # deleted by an operator: kept, sends nothing
    deleted_by: str | None = None

    @property
    def success_rate(self) -> float | None:
        return self.succeeded / self.attempts if self.attempts else None

    @property
    def health(self) -> str:
        """Its state, as every view shows it (``inbox.domain.endpoint_health``)."""
        recent = Recent(self.recent_attempts, self.recent_failures)
        return str(state_of(self.enabled, self.paused, self.circuit, recent))


# Attempts over the last day per endpoint, the backlog per endpoint, and the latest
# failed attempt (an index scan backwards over attempt ids, stopping at the first).
_ENDPOINTS = f"""
WITH recent AS (
    SELECT d.endpoint_id, count(*) AS attempts,
           count(*) FILTER (WHERE a.status BETWEEN 200 AND 299) AS succeeded,
           avg(a.latency_ms) AS avg_ms,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY a.latency_ms) AS p95_ms,
           max(a.at) FILTER (WHERE a.status BETWEEN 200 AND 299) AS last_ok_at
      FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
     WHERE a.at >= now() - make_interval(hours => :hours) AND {_SCOPED.format(col="d.tenant_id")}
     GROUP BY d.endpoint_id
), backlog AS (
    SELECT endpoint_id, count(*) FILTER (WHERE state IN ('pending', 'sending')) AS pending,
           count(*) FILTER (WHERE state = 'held') AS held,
           count(*) FILTER (WHERE state = 'failed') AS failed
      FROM deliveries WHERE state <> 'delivered' AND {_SCOPED.format(col="tenant_id")}
     GROUP BY endpoint_id
)
SELECT ep.id, ep.public_id, t.name AS tenant, ep.url, ep.event_types, ep.enabled,
       ep.disabled_reason, ep.failing, ep.max_attempts, ep.timeout_ms, ep.max_in_flight,
       ep.retry_schedule, ep.created_at, ep.paused, ep.circuit, ep.rate_per_second,
       ep.ordered, ep.deleted_at, ep.deleted_by,
       rw.attempts AS recent_attempts, rw.failures AS recent_failures,
       (SELECT count(*) FROM endpoint_secrets s
         WHERE s.endpoint_id = ep.id AND s.revoked_at IS NULL) AS active_secrets,
       coalesce(r.attempts, 0) AS attempts, coalesce(r.succeeded, 0) AS succeeded,
       r.avg_ms, r.p95_ms, r.last_ok_at,
       coalesce(b.pending, 0) AS pending, coalesce(b.held, 0) AS held,
       coalesce(b.failed, 0) AS failed,
       le.at AS last_error_at, le.status AS last_error_status,
       le.error_class AS last_error_class, le.excerpt AS last_error_excerpt
  FROM endpoints ep JOIN tenants t ON t.id = ep.tenant_id
  LEFT JOIN recent r ON r.endpoint_id = ep.id
  LEFT JOIN backlog b ON b.endpoint_id = ep.id
 CROSS JOIN LATERAL ({RECENT}) rw
  LEFT JOIN LATERAL (
        SELECT a.at, a.status, a.error_class, a.excerpt
          FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
         WHERE d.endpoint_id = ep.id AND (a.status IS NULL OR a.status NOT BETWEEN 200 AND 299)
         ORDER BY a.id DESC LIMIT 1) le ON true
 WHERE {_SCOPED.format(col="ep.tenant_id")}
   AND (CAST(:public_id AS text) IS NULL OR ep.public_id = :public_id)
   -- a deleted endpoint is shown when asked for by its id, never listed
   AND (CAST(:public_id AS text) IS NOT NULL OR ep.deleted_at IS NULL)
 ORDER BY t.name, ep.id
"""


def endpoints(conn: Connection, scope: int | None) -> list[EndpointHealth]:
    params = {"scope": scope, "hours": HEALTH_HOURS, "public_id": None}
    return _rows(EndpointHealth, conn.execute(text(_ENDPOINTS), params))


def endpoint(conn: Connection, public_id: str, scope: int | None) -> EndpointHealth | None:
    params = {"scope": scope, "hours": HEALTH_HOURS, "public_id": public_id}
    rows = _rows(EndpointHealth, conn.execute(text(_ENDPOINTS), params))
    return rows[0] if rows else None


@dataclass(frozen=True, slots=True)
class SourceSummary:
    id: int
    tenant: str
    name: str
    scheme: str
    enabled: bool
    tenant_disabled: bool
    options: dict[str, Any]
    created_at: datetime
    active_secrets: int
    last_hour: int
    last_day: int
    quarantined_day: int
    failures_day: int
    last_received_at: datetime | None
    last_failure_at: datetime | None
    last_failure_class: str | None
    last_failure_message: str | None


_SOURCES = f"""
WITH day AS (
    -- One pass over the last day's events (ix_events_received_at), counted per source.
    SELECT e.source_id,
           count(*) FILTER (WHERE e.received_at >= now() - interval '1 hour') AS last_hour,
           count(*) AS last_day,
           count(*) FILTER (WHERE e.state = 'quarantined') AS quarantined_day,
           max(e.received_at) AS last_received_at
      FROM events e
     WHERE e.received_at >= now() - interval '1 day' AND {_SCOPED.format(col="e.tenant_id")}
     GROUP BY e.source_id
), failures AS (
    -- The last day's failed attempts per source (ix_event_attempts_at), and the latest one.
    SELECT DISTINCT ON (e.source_id) e.source_id,
           count(*) OVER (PARTITION BY e.source_id) AS failures_day,
           a.at, a.error_class, a.error_message
      FROM event_attempts a JOIN events e ON e.id = a.event_id
     WHERE a.at >= now() - interval '1 day' AND {_SCOPED.format(col="e.tenant_id")}
     ORDER BY e.source_id, a.id DESC
)
SELECT s.id, t.name AS tenant, s.name, s.scheme, s.enabled, t.disabled AS tenant_disabled,
       s.options, s.created_at,
       (SELECT count(*) FROM source_secrets x
         WHERE x.source_id = s.id AND x.revoked_at IS NULL) AS active_secrets,
       coalesce(d.last_hour, 0) AS last_hour, coalesce(d.last_day, 0) AS last_day,
       coalesce(d.quarantined_day, 0) AS quarantined_day, d.last_received_at,
       coalesce(f.failures_day, 0) AS failures_day,
       f.at AS last_failure_at, f.error_class AS last_failure_class,
       f.error_message AS last_failure_message
  FROM sources s JOIN tenants t ON t.id = s.tenant_id
  LEFT JOIN day d ON d.source_id = s.id
  LEFT JOIN failures f ON f.source_id = s.id
 WHERE {_SCOPED.format(col="s.tenant_id")}
 ORDER BY t.name, s.name
"""


def sources(conn: Connection, scope: int | None) -> list[SourceSummary]:
    return _rows(SourceSummary, conn.execute(text(_SOURCES), {"scope": scope}))


@dataclass(frozen=True, slots=True)
class DeadLetterGroup:
    tenant: str
    source: str
    event_type: str | None
    error_class: str | None
    count: int
    first_at: datetime | None
    last_at: datetime | None
    sample_message: str | None
    latest: str


_GROUPS = f"""
SELECT t.name AS tenant, s.name AS source, e.event_type, e.last_error_class AS error_class,
       count(*) AS count, min(e.finished_at) AS first_at, max(e.finished_at) AS last_at,
       (array_agg(e.last_error_message ORDER BY e.id DESC))[1] AS sample_message,
       (array_agg(e.public_id ORDER BY e.id DESC))[1] AS latest
  FROM events e JOIN tenants t ON t.id = e.tenant_id JOIN sources s ON s.id = e.source_id
 WHERE e.state = 'quarantined' AND {_SCOPED.format(col="e.tenant_id")}
 GROUP BY t.name, s.name, e.event_type, e.last_error_class
 ORDER BY count(*) DESC, max(e.finished_at) DESC NULLS LAST
 LIMIT :limit
"""


def dead_letter_groups(
    conn: Connection, scope: int | None, limit: int = 200
) -> list[DeadLetterGroup]:
    """Quarantined events grouped by tenant, source, type and error class, largest first."""
    return _rows(DeadLetterGroup, conn.execute(text(_GROUPS), {"scope": scope, "limit": limit}))


@dataclass(frozen=True, slots=True)
class DeliveryGroup:
    tenant: str
    endpoint: str
    url: str
    event_type: str
    last_error: str | None
    count: int
    first_at: datetime | None
    last_at: datetime | None


_DELIVERY_GROUPS = f"""
SELECT t.name AS tenant, ep.public_id AS endpoint, ep.url, d.event_type, d.last_error,
       count(*) AS count, min(d.finished_at) AS first_at, max(d.finished_at) AS last_at
  FROM deliveries d JOIN endpoints ep ON ep.id = d.endpoint_id JOIN tenants t ON t.id = d.tenant_id
 WHERE d.state = 'failed' AND {_SCOPED.format(col="d.tenant_id")}
 GROUP BY t.name, ep.public_id, ep.url, d.event_type, d.last_error
 ORDER BY count(*) DESC LIMIT :limit
"""


def failed_delivery_groups(
    conn: Connection, scope: int | None, limit: int = 100
) -> list[DeliveryGroup]:
    """Failed deliveries grouped by endpoint, type and last error."""
    params = {"scope": scope, "limit": limit}
    return _rows(DeliveryGroup, conn.execute(text(_DELIVERY_GROUPS), params))


def audit_trail(conn: Connection, kind: str, subject_id: int, limit: int = 50) -> list[AuditEntry]:
    """Who did what to one subject (an endpoint, a source), newest first."""
    rows = conn.execute(
        text(
            "SELECT at, actor, action FROM audit_log WHERE subject_kind = :k AND subject_id = :id"
            " ORDER BY id DESC LIMIT :n"
        ),
        {"k": kind, "id": subject_id, "n": limit},
    )
    return _rows(AuditEntry, rows)
