"""Endpoints' state (``inbox.domain.endpoint_health``) and backlog, as the CLI, the admin
API and ``/metrics`` read them; the console's endpoint pages add their statistics to the
same inputs (``inbox.store.reads.reads``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.endpoint_health import WINDOW_MINUTES, EndpointState, Recent, state_of
from inbox.store.reads.scope import Scope, as_rows, scoped

# Attempts of the endpoint ``ep`` in the window, and those that got no 2xx: a LATERAL
# over its deliveries' attempts (the console's query uses the same fragment).
RECENT = f"""
    SELECT count(*) AS attempts,
           count(*) FILTER (WHERE a.status IS NULL OR a.status NOT BETWEEN 200 AND 299)
               AS failures
      FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
     WHERE d.endpoint_id = ep.id AND a.at >= now() - interval '{WINDOW_MINUTES} minutes'
"""

_STATUS = f"""
SELECT ep.id, ep.public_id, t.name AS tenant, ep.enabled, ep.paused, ep.circuit,
       ep.disabled_reason, ep.circuit_changed_at, ep.rate_per_second, ep.max_in_flight,
       ep.ordered, ep.deleted_at,
       r.attempts, r.failures,
       b.waiting, b.held, coalesce(extract(epoch FROM now() - b.held_since), 0) AS held_age
  FROM endpoints ep JOIN tenants t ON t.id = ep.tenant_id
 CROSS JOIN LATERAL ({RECENT}) r
 CROSS JOIN LATERAL (
       SELECT count(*) FILTER (WHERE state IN ('pending', 'sending')) AS waiting,
              count(*) FILTER (WHERE state = 'held') AS held,
              min(created_at) FILTER (WHERE state = 'held') AS held_since
         FROM deliveries WHERE endpoint_id = ep.id AND state IN ('pending', 'sending', 'held')
 ) b
 WHERE {scoped("ep.tenant_id")}
   AND (CAST(:public_id AS text) IS NULL OR ep.public_id = :public_id)
   -- a deleted endpoint: shown when asked for by its id (or with ``deleted``), else not
   AND (ep.deleted_at IS NULL OR CAST(:public_id AS text) IS NOT NULL OR :deleted)
 ORDER BY t.name, ep.id
"""


@dataclass(frozen=True, slots=True)
class EndpointStatus:
    id: int
    public_id: str
    tenant: str
    state: EndpointState
    circuit: str
    circuit_changed_at: datetime | None
    disabled_reason: str | None
    recent: Recent
    waiting: int  # pending or being sent
    held: int
    held_age_seconds: float  # of the oldest held delivery; 0 when none
    rate_per_second: float | None = None  # its limit, across every courier (None: none)
    max_in_flight: int = 4
    ordered: bool = False  # one in flight, the next after the previous is delivered or dead
    deleted_at: datetime | None = None  # an operator deleted it: it sends nothing

    def public(self) -> dict[str, Any]:
        """What the API and ``--json`` show: no row ids."""
        return {
            "endpoint": self.public_id,
            "tenant": self.tenant,
            "state": str(self.state),
            "circuit": self.circuit,
            "circuit_changed_at": self.circuit_changed_at,
            "disabled_reason": self.disabled_reason,
            "attempts_recent": self.recent.attempts,
            "failure_rate": round(self.recent.failure_rate, 4),
            "waiting": self.waiting,
            "held": self.held,
            "held_oldest_age_seconds": round(self.held_age_seconds, 1),
            "rate_per_second": self.rate_per_second,
            "max_in_flight": self.max_in_flight,
            "ordered": self.ordered,
            "deleted_at": self.deleted_at,
        }


def statuses(
    conn: Connection,
    scope: Scope = None,
    public_id: str | None = None,
    deleted: bool = False,
) -> list[EndpointStatus]:
    """Every endpoint's status (deleted ones only when ``deleted``), or one by its id."""
    params = {"scope": scope, "public_id": public_id, "deleted": deleted}
    rows = conn.execute(text(_STATUS), params)
    out = []
    for r in rows:
        recent = Recent(int(r.attempts), int(r.failures))
        out.append(
            EndpointStatus(
                id=r.id,
                public_id=r.public_id,
                tenant=r.tenant,
                state=state_of(r.enabled, r.paused, r.circuit, recent),
                circuit=r.circuit,
                circuit_changed_at=r.circuit_changed_at,
                disabled_reason=r.disabled_reason,
                recent=recent,
                waiting=int(r.waiting),
                held=int(r.held),
                held_age_seconds=float(r.held_age),
                rate_per_second=r.rate_per_second,
                max_in_flight=r.max_in_flight,
                ordered=r.ordered,
                deleted_at=r.deleted_at,
            )
        )
    return out


HEALTH_HOURS = 24


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
_HEALTH = f"""
WITH recent AS (
    SELECT d.endpoint_id, count(*) AS attempts,
           count(*) FILTER (WHERE a.status BETWEEN 200 AND 299) AS succeeded,
           avg(a.latency_ms) AS avg_ms,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY a.latency_ms) AS p95_ms,
           max(a.at) FILTER (WHERE a.status BETWEEN 200 AND 299) AS last_ok_at
      FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
     WHERE a.at >= now() - make_interval(hours => :hours) AND {scoped("d.tenant_id")}
     GROUP BY d.endpoint_id
), backlog AS (
    SELECT endpoint_id, count(*) FILTER (WHERE state IN ('pending', 'sending')) AS pending,
           count(*) FILTER (WHERE state = 'held') AS held,
           count(*) FILTER (WHERE state = 'failed') AS failed
      FROM deliveries WHERE state <> 'delivered' AND {scoped("tenant_id")}
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
 WHERE {scoped("ep.tenant_id")}
   AND (CAST(:public_id AS text) IS NULL OR ep.public_id = :public_id)
   -- a deleted endpoint is shown when asked for by its id, never listed
   AND (CAST(:public_id AS text) IS NOT NULL OR ep.deleted_at IS NULL)
 ORDER BY t.name, ep.id
"""


def health(conn: Connection, scope: Scope) -> list[EndpointHealth]:
    params = {"scope": scope, "hours": HEALTH_HOURS, "public_id": None}
    return as_rows(EndpointHealth, conn.execute(text(_HEALTH), params))


def health_of(conn: Connection, public_id: str, scope: Scope) -> EndpointHealth | None:
    params = {"scope": scope, "hours": HEALTH_HOURS, "public_id": public_id}
    rows = as_rows(EndpointHealth, conn.execute(text(_HEALTH), params))
    return rows[0] if rows else None
