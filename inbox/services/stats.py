"""What ``/metrics`` reads from the database at each scrape, on one connection.

The collectors (``web.metrics``) turn these rows into metric families; a scrape whose
read fails says so in ``inbox_stats_up`` rather than failing.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from inbox.store.reads import endpoint_health, invariants, lanes, stats
from inbox.store.reads.endpoint_health import EndpointStatus
from inbox.store.reads.invariants import OpenCount
from inbox.store.reads.lanes import LaneCount
from inbox.store.reads.stats import BacklogRow, DepthRow


@dataclass(frozen=True, slots=True)
class Snapshot:
    depth: list[DepthRow]
    backlog: list[BacklogRow]
    endpoints: list[EndpointStatus]
    blocked: list[LaneCount]


def snapshot(engine: Engine) -> Snapshot:
    """Inbox depth, delivery backlog, endpoints' state and blocked lanes, read together."""
    with engine.connect() as conn:
        return Snapshot(
            stats.inbox_depth(conn),
            stats.delivery_backlog(conn),
            endpoint_health.statuses(conn),
            lanes.blocked_counts(conn),
        )


def open_violations(engine: Engine) -> list[OpenCount]:
    """The open violations of the self-audit, counted per invariant."""
    with engine.connect() as conn:
        return invariants.open_counts(conn)
