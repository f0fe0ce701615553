"""Endpoints' state (``inbox.domain.endpoint_health``) and backlog, as the CLI, the admin
API and ``/metrics`` read them; the console's endpoint pages add their statistics to the
same inputs (``inbox.store.reads.reads``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.endpoint_health import WINDOW_MINUTES, Recent, state_of

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
 WHERE (CAST(:scope AS bigint) IS NULL OR ep.tenant_id = :scope)
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
    state: str  # an EndpointState (inbox.domain.endpoint_health)
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
    scope: int | None = None,
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
                state=str(state_of(r.enabled, r.paused, r.circuit, recent)),
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
