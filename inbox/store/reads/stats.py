"""Scrape-time statistics: how much is waiting, and for how long.

Read by the ``/metrics`` collector on every scrape, so each query walks an index range
per (source, state) rather than the whole events table.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

from inbox.domain.states import DeliveryState, EventState

PENDING_STATES = tuple(s.value for s in (EventState.RECEIVED, EventState.PROCESSING))


@dataclass(frozen=True, slots=True)
class DepthRow:
    tenant: str
    source: str
    state: EventState
    count: int
    # Seconds since the oldest such event was received; 0 when there is none.
    oldest_age_seconds: float

    def __post_init__(self) -> None:  # the column's text, as the enum it is
        object.__setattr__(self, "state", EventState(self.state))


@dataclass(frozen=True, slots=True)
class BacklogRow:
    tenant: str
    state: DeliveryState
    count: int
    oldest_age_seconds: float

    def __post_init__(self) -> None:  # the column's text, as the enum it is
        object.__setattr__(self, "state", DeliveryState(self.state))


# One row per (source, state), zero counts included, so every source's series exist.
# Each branch of the LATERAL is a range scan of ix_events_listing (tenant_id, source_id,
# state): its cost follows the number of events in that state, not the size of the table.
# The states are literals, not a joined VALUES list, so the planner estimates each from
# the column's statistics (with a joined list it guesses high and pays for JIT).
_DEPTH = text(
    """
    SELECT t.name AS tenant, s.name AS source, c.state, c.n,
           coalesce(extract(epoch FROM now() - c.oldest), 0) AS oldest_age
      FROM sources s
      JOIN tenants t ON t.id = s.tenant_id
     CROSS JOIN LATERAL (
           SELECT 'received' AS state, count(*) AS n, min(e.received_at) AS oldest
             FROM events e
            WHERE e.tenant_id = s.tenant_id AND e.source_id = s.id AND e.state = 'received'
           UNION ALL
           SELECT 'processing', count(*), min(e.received_at)
             FROM events e
            WHERE e.tenant_id = s.tenant_id AND e.source_id = s.id AND e.state = 'processing'
           UNION ALL
           SELECT 'quarantined', count(*), min(e.received_at)
             FROM events e
            WHERE e.tenant_id = s.tenant_id AND e.source_id = s.id AND e.state = 'quarantined'
     ) c
     ORDER BY t.name, s.name, c.state
    """
)

# The same shape for outbound deliveries, per tenant with endpoints, over
# ix_deliveries_listing (tenant_id, state, id).
_BACKLOG = text(
    """
    SELECT t.name AS tenant, c.state, c.n,
           coalesce(extract(epoch FROM now() - c.oldest), 0) AS oldest_age
      FROM tenants t
     CROSS JOIN LATERAL (
           SELECT 'pending' AS state, count(*) AS n, min(d.created_at) AS oldest
             FROM deliveries d WHERE d.tenant_id = t.id AND d.state = 'pending'
           UNION ALL
           SELECT 'sending', count(*), min(d.created_at)
             FROM deliveries d WHERE d.tenant_id = t.id AND d.state = 'sending'
           UNION ALL
           SELECT 'failed', count(*), min(d.created_at)
             FROM deliveries d WHERE d.tenant_id = t.id AND d.state = 'failed'
     ) c
     WHERE EXISTS (SELECT 1 FROM endpoints ep WHERE ep.tenant_id = t.id)
     ORDER BY t.name, c.state
    """
)


# A scrape's queries take milliseconds; compiling them (chosen when the planner's row
# estimates for small, rarely analysed tables like tenants are high) takes far longer.
_NO_JIT = text("SET LOCAL jit = off")


def inbox_depth(conn: Connection) -> list[DepthRow]:
    """Events received, processing and quarantined per tenant and source, with the age
    of the oldest of each. Runs in the caller's transaction."""
    conn.execute(_NO_JIT)
    return [
        DepthRow(r.tenant, r.source, r.state, int(r.n), float(r.oldest_age))
        for r in conn.execute(_DEPTH)
    ]


def delivery_backlog(conn: Connection) -> list[BacklogRow]:
    """Outbound deliveries pending, sending and failed per tenant that has endpoints."""
    conn.execute(_NO_JIT)
    return [
        BacklogRow(r.tenant, r.state, int(r.n), float(r.oldest_age)) for r in conn.execute(_BACKLOG)
    ]
