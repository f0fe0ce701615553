"""A claimed batch of playbooks with outside effects, run in lockstep, against the in-memory
store: one commit per step for the whole batch, each event's recovery points durable before
its next step, a lost lease or a failing step stopping that event alone.

The outside system here counts every call by its step key (``Outside``): it applies a key
once, as a system given an idempotency key does, and the tests count both.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from inbox import Playbook, StepContext
from inbox.domain.playbooks import Registry
from inbox.domain.states import EventState
from inbox.infra import tracing
from inbox.infra.config import Settings
from inbox.services.drain import drain_once
from tests.unit.fake_store import InMemoryStore, offline

STORED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Crash(BaseException):
    """The worker process dies here: nothing after it runs in this process."""


class Outside:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def apply(self, ctx: StepContext) -> dict[str, Any]:
        with self.lock:
            self.calls[ctx.step_key] += 1
        return {"applied": ctx.step}

    def rows(self) -> set[str]:
        return set(self.calls)


@pytest.fixture(params=[1, 4], ids=["one-at-a-time", "pooled"])
def settings(request: pytest.FixtureRequest) -> Settings:
    return Settings(lease_seconds=30, batch_size=20, step_concurrency=request.param)


def registry(pb: Playbook) -> Registry:
    reg = Registry()
    reg.register(pb, event_type="x")
    return reg


def events(store: InMemoryStore, n: int) -> list[int]:
    return [store.add_event(event_type="x") for _ in range(n)]


def test_a_two_step_batch_commits_once(settings: Settings) -> None:
    store, outside = InMemoryStore(), Outside()
    pb = Playbook("two")
    pb.step("check", effect=False)(lambda ctx: {"checked": True})
    pb.step("apply")(outside.apply)
    ids = events(store, 5)
    before = store.transactions
    result = drain_once(offline(settings), owner="w", reg=registry(pb), store=store)
    assert result.states == {"completed": 5}
    assert store.transactions - before == 2  # claim + load, then every point and completion
    assert store.calls.count("complete_many") == 1 and "record_steps" not in store.calls
    assert outside.calls == Counter({f"evt_{i:04d}.apply": 1 for i in ids})
    for i in ids:
        assert store.event(i).steps == {"check": {"checked": True}, "apply": {"applied": "apply"}}


def test_each_recovery_point_is_durable_before_the_next_step(settings: Settings) -> None:
    store, outside = InMemoryStore(), Outside()
    seen: dict[str, set[str]] = {}
    pb = Playbook("three")

    def looking(name: str, effect: bool) -> None:
        @pb.step(name, effect=effect)
        def step(ctx: StepContext) -> dict[str, Any]:
            committed = store.event(ctx.event.id).steps
            with outside.lock:
                seen[ctx.step_key] = set(committed)
            return outside.apply(ctx)

    looking("a", True)
    looking("b", False)
    looking("c", True)
    ids = events(store, 4)
    before = store.transactions
    result = drain_once(offline(settings), owner="w", reg=registry(pb), store=store)
    assert result.states == {"completed": 4}
    # claim + load, step a's points for all four, then b's and c's with the completions
    assert store.transactions - before == 3
    assert store.calls.count("record_many") == 1
    for i in ids:
        assert seen[f"evt_{i:04d}.a"] == set()
        assert seen[f"evt_{i:04d}.b"] == {"a"}
        assert seen[f"evt_{i:04d}.c"] == {"a"}  # b has no outside effect: it rides with c
        assert set(store.event(i).steps) == {"a", "b", "c"}


def test_a_lease_stolen_mid_batch_stops_that_event_alone(settings: Settings) -> None:
    store, outside = InMemoryStore(), Outside()
    ids = events(store, 5)
    victim = f"evt_{ids[2]:04d}"
    pb = Playbook("two")

    @pb.step("a")
    def a(ctx: StepContext) -> dict[str, Any]:
        if ctx.event.public_id == victim and ctx.event.attempt == 1:
            # another worker's sweep takes the event while its first step runs
            store.event(ctx.event.id).lease_expires_at = store.now - 1
            with store.begin() as tx:
                store.sweep_expired(tx)
        return outside.apply(ctx)

    pb.step("b")(outside.apply)
    result = drain_once(offline(settings), owner="w", reg=registry(pb), store=store)
    assert result.states == {"completed": 4, "lost": 1}
    row = store.event(ids[2])
    assert row.state == EventState.RECEIVED and row.steps == {}  # nothing committed for it
    assert f"{victim}.b" not in outside.calls  # it stopped after its lost step
    again = drain_once(offline(settings), owner="thief", reg=registry(pb), store=store)
    assert again.states == {"completed": 1}
    assert all(store.event(i).state == EventState.COMPLETED for i in ids)
    # every key applied once; the victim's first step called again with the same key
    assert outside.rows() == {f"evt_{i:04d}.{s}" for i in ids for s in "ab"}
    assert outside.calls[f"{victim}.a"] == 2 and outside.calls[f"{victim}.b"] == 1
    assert sum(outside.calls.values()) == 11


def test_a_crash_between_the_steps_reruns_only_the_second(settings: Settings) -> None:
    store, outside = InMemoryStore(), Outside()
    crashing = [True]
    pb = Playbook("two")
    pb.step("a")(outside.apply)

    @pb.step("b")
    def b(ctx: StepContext) -> dict[str, Any]:
        if crashing[0]:
            raise Crash()
        return outside.apply(ctx)

    ids = events(store, 6)
    with pytest.raises(Crash):
        drain_once(offline(settings), owner="w", reg=registry(pb), store=store)
    assert all(set(store.event(i).steps) == {"a"} for i in ids)  # one commit for all six
    crashing[0] = False
    store.advance(settings.lease_seconds + 1)
    with store.begin() as tx:
        assert store.sweep_expired(tx) == (6, 0)
    result = drain_once(offline(settings), owner="w2", reg=registry(pb), store=store)
    assert result.states == {"completed": 6}
    assert outside.calls == Counter({f"evt_{i:04d}.{s}": 1 for i in ids for s in "ab"})


def test_a_step_that_raises_retries_that_event_alone(settings: Settings) -> None:
    store, outside = InMemoryStore(), Outside()
    ids = events(store, 5)
    bad = f"evt_{ids[1]:04d}"
    pb = Playbook("two")
    pb.step("a")(outside.apply)

    @pb.step("b")
    def b(ctx: StepContext) -> dict[str, Any]:
        if ctx.event.public_id == bad and ctx.event.attempt == 1:
            raise RuntimeError("the outside system said no")
        return outside.apply(ctx)

    result = drain_once(offline(settings), owner="w", reg=registry(pb), store=store)
    assert result.states == {"completed": 4, "received": 1}
    assert len(result.retry_in) == 1
    row = store.event(ids[1])
    assert row.state == EventState.RECEIVED and set(row.steps) == {"a"}
    store.advance(3600)
    assert drain_once(offline(settings), owner="w", reg=registry(pb), store=store).states == {
        "completed": 1
    }
    assert outside.calls == Counter({f"evt_{i:04d}.{s}": 1 for i in ids for s in "ab"})


def test_a_callback_commits_with_its_step_and_not_for_a_lost_event(settings: Settings) -> None:
    store = InMemoryStore()
    store.add_endpoint(1, 7)
    ids = events(store, 3)
    lost = ids[0]
    pb = Playbook("tell")

    @pb.step("tell")
    def tell(ctx: StepContext) -> str:
        ctx.send("told", {"n": ctx.event.id})
        if ctx.event.id == lost:
            store.event(lost).fence += 1  # another worker's claim
        return "ok"

    pb.step("after", effect=False)(lambda ctx: "done")
    rung: list[set[int]] = []
    result = drain_once(
        offline(settings), owner="w", notify=rung.append, reg=registry(pb), store=store
    )
    assert result.states == {"completed": 2, "lost": 1}
    assert len(store.data.deliveries) == 2 and rung == [{7}]
    assert store.calls.index("enqueue_deliveries") > store.calls.index("record_many")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.install(None)
        provider.shutdown()


def test_each_event_has_one_run_span_holding_its_steps(
    settings: Settings, spans: InMemorySpanExporter
) -> None:
    store = InMemoryStore()
    for n in range(3):
        store.add_event(event_type="x", public_id=f"evt_{n}", trace_context=STORED)
    pb = Playbook("two")
    pb.step("a")(lambda ctx: 1)
    pb.step("b")(lambda ctx: 2)
    drain_once(offline(settings), owner="w", reg=registry(pb), store=store)
    finished = spans.get_finished_spans()
    runs = {s.attributes["inbox.event_id"]: s for s in finished if s.name == "inbox.run"}
    assert sorted(runs) == ["evt_0", "evt_1", "evt_2"]
    assert {r.attributes["inbox.outcome"] for r in runs.values()} == {"completed"}
    assert {f"{r.parent.span_id:016x}" for r in runs.values()} == {STORED.split("-")[2]}
    for s in (s for s in finished if s.name == "inbox.step"):
        run = runs[s.attributes["inbox.event_id"]]
        assert s.parent.span_id == run.context.span_id
        assert s.context.trace_id == run.context.trace_id
    assert len([s for s in finished if s.name == "inbox.step"]) == 6
