"""The sweep: the lifeline that finds what the broker lost, as one plain function.

Every ``INBOX_SWEEP_SECONDS`` the beat rings it (``workers.tasks.sweep`` is its shell):
expired leases go back to the queue, held events whose playbook is now here are released,
the claim's floor follows the oldest unfinished day, expired delivery leases are requeued,
and what is due is returned for the shell to ring: the drain, each endpoint's courier, the
bulk replays due to run, and an alarm for each retry due before the next sweeps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from inbox.domain.playbooks import Registry, registry
from inbox.domain.records import BulkJobId, EndpointId
from inbox.services.drain import release_held, sweep_once
from inbox.services.runtime import Runtime
from inbox.store.reads import bulk as bulk_reads
from inbox.store.reads import deliveries as deliveries_reads
from inbox.store.reads import queue as queue_reads
from inbox.store.write import deliveries, queue

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Swept:
    """What one sweep changed, and what its shell rings now."""

    requeued: int = 0
    quarantined: int = 0
    due: int = 0
    released: int = 0
    unparked: int = 0  # parked events found with nothing before them (see below)
    endpoints: set[EndpointId] = field(default_factory=set)  # couriers with due deliveries
    jobs: list[BulkJobId] = field(default_factory=list)  # bulk replays due to (re)start
    drain_alarms: list[float] = field(default_factory=list)  # seconds until a retry is due
    deliver_alarms: list[tuple[int, float]] = field(default_factory=list)  # (endpoint, s)

    @property
    def drain_now(self) -> bool:
        """Events are due (or were just put back): ring the drain."""
        return bool(self.due or self.requeued or self.released or self.unparked)

    def counts(self) -> dict[str, int]:
        return {
            "requeued": self.requeued,
            "quarantined": self.quarantined,
            "due": self.due,
            "released": self.released,
            "unparked": self.unparked,
        }


def run_once(rt: Runtime, horizon: float, slot: float, reg: Registry = registry) -> Swept:
    """One sweep. ``horizon``: how far ahead retries get their alarms (seconds), rounded
    up to ``slot``."""
    engine = rt.engine
    result = sweep_once(engine)
    released = release_held(rt, reg)
    with engine.begin() as conn:  # the claim's floor follows the oldest unfinished day
        queue.raise_floor(conn)
    with engine.begin() as conn:
        # Parked events (behind their lane's unfinished event) are made due by the commit
        # that finishes it, never by a timer; one found with nothing before it is a broken
        # promise, repaired here and said loudly.
        unparked = queue.unpark_orphans(conn)
    if unparked:
        log.error("parked events had nothing before them in their lane", extra={"n": unparked})
    with engine.begin() as conn:
        endpoints = set(deliveries.sweep(conn))
        jobs = bulk_reads.due_jobs(conn)
        # The alarms' lifeline: retries due before the next sweeps get theirs (again).
        drain_alarms = queue_reads.due_within(conn, horizon, slot)
        deliver_alarms = deliveries_reads.due_within(conn, horizon, slot)
    return Swept(
        result.requeued,
        result.quarantined,
        result.due,
        released,
        unparked,
        endpoints,
        jobs,
        drain_alarms,
        deliver_alarms,
    )
