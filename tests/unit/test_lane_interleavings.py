"""Random interleavings of ordered lanes against the in-memory store (``tests.lane_machine``):
one event of a lane at a time, never before an earlier one is completed or skipped, and
nothing stranded once the blockers are skipped. The same programs run against PostgreSQL
in tests/integration/test_lane_property.py."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings

from inbox.domain.records import Claim
from inbox.domain.states import EventState
from inbox.testing import InMemoryStore
from tests.lane_machine import (
    MAX_ATTEMPTS,
    POISON,
    PROGRAMS,
    REPLAYED_WHILE_RUNNING,
    Row,
    run,
)


class Fake:
    def __init__(self) -> None:
        self.store = InMemoryStore()

    def add(self, lane: bytes) -> int:
        return int(self.store.add_event(ordering_key=lane, max_attempts=MAX_ATTEMPTS))

    def claim(self, limit: int) -> list[Claim]:
        with self.store.begin() as tx:
            return self.store.claim(tx, "w", limit, 30)

    def complete(self, c: Claim) -> None:
        with self.store.begin() as tx:
            self.store.complete(tx, c, "completed", {}, None, None)

    def fail(self, c: Claim, permanent: bool) -> None:
        with self.store.begin() as tx:
            self.store.fail(tx, c, ValueError("x"), permanent, 0.0)

    def expire_and_sweep(self, c: Claim) -> None:
        row = self.store.event(c.id)
        if row.fence == c.fence and row.state == EventState.PROCESSING:
            row.lease_expires_at = self.store.now - 1
        with self.store.begin() as tx:
            self.store.sweep_expired(tx)

    def replay(self, event_id: int) -> None:  # as inbox.store.write.operator.replay does
        row = self.store.event(event_id)
        self.store._move(row, EventState.RECEIVED)
        row.attempts, row.available_at, row.lane_skipped = 0, self.store.now, False
        row.replay += 1

    def skip(self, event_id: int) -> None:
        self.store.event(event_id).lane_skipped = True

    def rows(self) -> dict[int, Row]:
        events: dict[int, Any] = self.store.data.events
        return {i: Row(r.ordering_key, str(r.state), r.lane_skipped) for i, r in events.items()}


@settings(max_examples=300, deadline=None)
@given(program=PROGRAMS)
@example(program=POISON)
@example(program=REPLAYED_WHILE_RUNNING)
def test_random_interleavings_keep_each_lane_in_order(program: list[tuple[Any, ...]]) -> None:
    run(Fake(), program)
