"""The drain and the sweeper against the in-memory store."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from inbox import Playbook, StepContext
from inbox.domain.playbooks import Registry, record
from inbox.domain.states import EventState
from inbox.infra import metrics
from inbox.infra.config import Settings
from inbox.services import drain
from inbox.services.drain import drain_once, sweep_once
from inbox.testing import InMemoryStore
from tests.unit.fake_store import offline

SETTINGS = Settings(lease_seconds=30, batch_size=10)


class StoreTime:
    """The drain's clock, made the store's: the test decides how long each event takes."""

    def __init__(self, store: InMemoryStore) -> None:
        self.store = store

    def monotonic(self) -> float:
        return self.store.now


def registry(*playbooks: tuple[Playbook, str]) -> Registry:
    reg = Registry()
    reg.by_name["record"] = record
    for pb, event_type in playbooks:
        reg.register(pb, event_type=event_type)
    return reg


def test_pure_playbooks_complete_together_in_one_transaction() -> None:
    store = InMemoryStore()
    ids = [store.add_event(event_type="ping") for _ in range(5)]
    before = store.transactions
    result = drain_once(offline(SETTINGS), owner="w", reg=registry(), store=store)
    assert result.claimed == 5
    assert result.states == {"completed": 5}
    assert store.transactions - before == 2  # claim + load, then one completion for all
    assert store.calls.count("complete_many") == 1
    assert "complete" not in store.calls
    for event_id in ids:
        row = store.event(event_id)
        assert row.state == EventState.COMPLETED
        assert row.steps == {"record": {"decision": "recorded", "event_type": "ping"}}


def test_a_playbook_with_effects_runs_in_lockstep_beside_the_pure_batch() -> None:
    store = InMemoryStore()
    pb = Playbook("pay")
    pb.step("pay")(lambda ctx: {"paid": True})
    paid = [store.add_event(event_type="invoice.paid") for _ in range(3)]
    pinged = store.add_event(event_type="ping")
    before = store.transactions
    result = drain_once(
        offline(SETTINGS), owner="w", reg=registry((pb, "invoice.paid")), store=store
    )
    assert result.states == {"completed": 4}
    assert all(store.event(i).steps == {"pay": {"paid": True}} for i in paid)
    # claim + load, the pure completion, then the effect step's points with the completions
    assert store.transactions - before == 3
    assert store.calls.count("complete_many") == 2 and "complete" not in store.calls
    assert store.event(pinged).state == EventState.COMPLETED


def test_a_pure_playbook_that_sends_callbacks_is_run_step_by_step() -> None:
    store = InMemoryStore()
    store.add_endpoint(1, 7)
    pb = Playbook("tell")

    @pb.step("tell", effect=False)
    def tell(ctx: StepContext) -> str:
        ctx.send("told", {})
        return "ok"

    store.add_event(event_type="x")
    rung: list[set[int]] = []
    result = drain_once(
        offline(SETTINGS), owner="w", notify=rung.append, reg=registry((pb, "x")), store=store
    )
    assert result.states == {"completed": 1}
    assert len(store.data.deliveries) == 1
    assert rung == [{7}]


def test_an_event_whose_lease_was_lost_in_memory_is_counted_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = InMemoryStore()
    monkeypatch.setattr(drain, "time", StoreTime(store))
    pb = Playbook("slow")

    @pb.step("slow", effect=False)
    def slow(ctx: StepContext) -> None:
        store.advance(SETTINGS.lease_seconds + 1)

    event_id = store.add_event(event_type="slow")
    result = drain_once(offline(SETTINGS), owner="w", reg=registry((pb, "slow")), store=store)
    assert result.states == {"lost": 1}
    assert store.event(event_id).state == EventState.PROCESSING
    assert store.event(event_id).steps == {}


@pytest.mark.parametrize("lockstep", [True, False])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_the_rest_of_a_slow_batch_keeps_its_leases(
    monkeypatch: pytest.MonkeyPatch, lockstep: bool, concurrency: int
) -> None:
    store = InMemoryStore()
    monkeypatch.setattr(drain, "time", StoreTime(store))
    pb = Playbook("slow")

    # once per business key (with no business key on the event) takes the step-by-step path
    @pb.step("work", once_per_business_key=not lockstep)
    def work(ctx: StepContext) -> None:
        store.advance(SETTINGS.lease_seconds / 3 + 1)  # each event takes over a third

    ids = [store.add_event(event_type="slow") for _ in range(4)]
    settings = Settings(lease_seconds=30, batch_size=10, step_concurrency=concurrency)
    result = drain_once(offline(settings), owner="w", reg=registry((pb, "slow")), store=store)
    # Four events at 11 s each: the last would start 33 s into a 30 s lease.
    assert result.states == {"completed": 4}
    assert store.calls.count("extend") >= 3
    assert ("complete" in store.calls) is not lockstep  # one event at a time
    assert all(store.event(i).state == EventState.COMPLETED for i in ids)


def held_count(source: str) -> float:
    labels = {"tenant": metrics.tenant_label("acme"), "source": source}
    return REGISTRY.get_sample_value("inbox_events_held_total", labels) or 0.0


def test_an_unknown_named_playbook_holds_the_event_without_spending_an_attempt() -> None:
    store = InMemoryStore()
    event_id = store.add_event(
        source_options={"playbook": "missing"}, max_attempts=1, source="held-src"
    )
    before = held_count("held-src")
    for _ in range(3):
        result = drain_once(offline(SETTINGS), owner="w", reg=registry(), store=store)
        assert result.states in ({"held": 1}, {})
        store.event(event_id).available_at = store.now  # as the sweep's release would
    row = store.event(event_id)
    assert row.state == EventState.RECEIVED and row.attempts == 0
    assert row.last_error == "PlaybookMissing"
    assert "fail" not in store.calls and store.calls.count("hold") == 3
    assert held_count("held-src") == before + 3  # inbox_events_held_total


def test_the_sweeper_requeues_expired_leases_and_quarantines_spent_events() -> None:
    store = InMemoryStore()
    again = store.add_event()
    spent = store.add_event(attempts=4, max_attempts=5)
    live = store.add_event()
    with store.begin() as tx:
        store.claim(tx, "w", 2, 10.0)  # again and spent
    store.advance(11)
    with store.begin() as tx:
        store.claim(tx, "w", 1, 10.0)  # live, freshly leased
    result = sweep_once(store)
    assert (result.requeued, result.quarantined) == (1, 1)
    assert store.event(again).state == EventState.RECEIVED
    assert store.event(again).last_error == "LeaseExpired"
    assert store.event(spent).state == EventState.QUARANTINED
    assert store.event(live).state == EventState.PROCESSING
    assert result.due == 1


def test_an_event_waits_for_the_earlier_one_with_its_ordering_key() -> None:
    store = InMemoryStore()
    first = store.add_event(ordering_key=b"k", event_type="a")
    second = store.add_event(ordering_key=b"k", event_type="a")
    other = store.add_event(ordering_key=b"j", event_type="a")
    seen: list[Any] = []
    pb = Playbook("ordered")
    pb.step("see")(lambda ctx: seen.append(ctx.event.id))
    reg = registry((pb, "a"))
    drain_once(offline(SETTINGS), owner="w", reg=reg, store=store)
    assert seen == [first, other]
    drain_once(offline(SETTINGS), owner="w", reg=reg, store=store)
    assert seen == [first, other, second]
