"""A lane advances on its predecessor's commit: the drain counts every event of a lane it
completed (its caller claims again at once), and rings ``wake`` right after that commit
while the batch still has work, on every path an event can take (run in memory, in
lockstep, alone), so another process can take the lane's next event, due from then on."""

from __future__ import annotations

from typing import Any

import pytest

from inbox import Playbook
from inbox.domain.playbooks import Registry, record
from inbox.domain.states import EventState
from inbox.infra.config import Settings
from inbox.services.drain import drain_once
from inbox.testing import InMemoryStore
from tests.unit.fake_store import offline

SETTINGS = Settings(lease_seconds=30, batch_size=10)
LANE = b"lane-1"


def _effect() -> Playbook:
    pb = Playbook("pay")
    pb.step("pay")(lambda ctx: {"paid": True})
    return pb


def _callback() -> Playbook:
    """A pure playbook that sends a callback: run again through ``run_claimed``."""
    pb = Playbook("tell")

    @pb.step("tell", effect=False)
    def tell(ctx: Any) -> dict[str, Any]:
        ctx.send("told", {"n": 1})
        return {}

    return pb


def _alone() -> Playbook:
    """A step once per business key: never in lockstep, run alone after the batch."""
    pb = Playbook("deny")
    pb.step("deny", once_per_business_key=True)(lambda ctx: {"denied": True})
    return pb


def _long() -> Playbook:
    """Two steps in lockstep: it goes on after a one-step event of the batch ends."""
    pb = Playbook("long")
    pb.step("one")(lambda ctx: {"one": True})
    pb.step("two")(lambda ctx: {"two": True})
    return pb


def _later() -> Playbook:
    """Run alone, after everything else of the batch."""
    pb = Playbook("later")
    pb.step("later", once_per_business_key=True)(lambda ctx: {"later": True})
    return pb


PATHS = {
    "in memory": ("ping", None),
    "pure, callback": ("tell", _callback),
    "lockstep": ("invoice.paid", _effect),
    "alone": ("deny", _alone),
}


def _registry(event_type: str, make: Any) -> Registry:
    reg = Registry()
    reg.by_name["record"] = record
    if make is not None:
        reg.register(make(), event_type=event_type)
    reg.register(_long(), event_type="long")
    reg.register(_later(), event_type="later")
    return reg


@pytest.mark.parametrize("path", sorted(PATHS))
def test_completing_an_event_of_a_lane_wakes_its_next_event_after_the_commit(path: str) -> None:
    event_type, make = PATHS[path]
    store = InMemoryStore()
    first, second, third = (
        store.add_event(event_type=event_type, ordering_key=LANE, business_key_digest=LANE)
        for _ in range(3)
    )
    other = store.add_event(event_type=event_type)  # no lane: completes, wakes nothing
    # Work the batch still has after the lane's event ends: a longer run in lockstep, and
    # one run alone after everything else.
    store.add_event(event_type="long", business_key_digest=b"x")
    store.add_event(event_type="later", business_key_digest=b"y")
    seen: list[tuple[EventState, bool]] = []

    def wake() -> None:  # what the doorbell would find, had it rung now
        seen.append((store.event(first).state, store._due(store.event(second))))

    reg = _registry(event_type, make)
    result = drain_once(offline(SETTINGS), owner="w", reg=reg, wake=wake, store=store)
    assert result.claimed == 4 and result.advanced == 1
    assert store.event(other).state == EventState.COMPLETED
    # Rung once, after the commit: the first is completed, the second due from then on.
    assert seen == [(EventState.COMPLETED, True)]
    assert store.event(third).state == EventState.RECEIVED and not store._due(store.event(third))
    seen.clear()
    again = drain_once(offline(SETTINGS), owner="w", reg=reg, wake=wake, store=store)
    assert again.claimed == 1 and again.advanced == 1
    assert store.event(second).state == EventState.COMPLETED
    assert seen == []  # the batch's last work: its caller claims again, no ring needed


def test_a_retry_does_not_advance_its_lane() -> None:
    store = InMemoryStore()
    pb = Playbook("boom")

    @pb.step("boom")
    def boom(ctx: Any) -> None:
        raise RuntimeError("not yet")

    reg = Registry()
    reg.register(pb, event_type="boom")
    first = store.add_event(event_type="boom", ordering_key=LANE)
    second = store.add_event(event_type="boom", ordering_key=LANE)
    rung: list[int] = []
    result = drain_once(
        offline(SETTINGS), owner="w", reg=reg, wake=lambda: rung.append(1), store=store
    )
    assert result.states == {"received": 1} and result.advanced == 0 and rung == []
    assert store.event(first).state == EventState.RECEIVED
    assert not store._due(store.event(second))
