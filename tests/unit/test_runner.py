"""The runner against the in-memory store: recovery points, fencing, retries, effects, callbacks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from inbox import PermanentError, Playbook, RetryableError, StepContext
from inbox.domain.outcomes import RunInterrupted
from inbox.domain.playbooks import Registry
from inbox.domain.records import Claim
from inbox.domain.states import EventState
from inbox.services.runner import RunConfig, run_claimed
from inbox.testing import InMemoryStore
from tests.helpers import wait_for

CFG = RunConfig(lease_seconds=60.0, retry_base_seconds=2.0, retry_cap_seconds=3600.0)


def one_claim(store: InMemoryStore, lease: float = CFG.lease_seconds, **event: Any) -> Claim:
    store.add_event(**event)
    with store.begin() as tx:
        [claim] = store.claim(tx, "worker-1", 10, lease)
    return claim


def registry_of(pb: Playbook) -> Registry:
    reg = Registry()
    reg.register(pb)
    return reg


def test_an_effect_step_is_committed_before_the_next_step_runs() -> None:
    store = InMemoryStore()
    claim = one_claim(store)
    seen: dict[str, Any] = {}
    pb = Playbook("two")

    @pb.step("charge")
    def charge(ctx: StepContext) -> dict[str, Any]:
        return {"charged": 1}

    @pb.step("mail")
    def mail(ctx: StepContext) -> dict[str, Any]:
        seen.update(store.event(claim.id).steps)  # what a crash here would leave behind
        return {"mailed": ctx.results["charge"]["charged"]}

    assert run_claimed(store, claim, CFG, registry_of(pb)) == "completed"
    assert seen == {"charge": {"charged": 1}}
    row = store.event(claim.id)
    assert row.state == EventState.COMPLETED
    assert row.steps == {"charge": {"charged": 1}, "mail": {"mailed": 1}}
    assert row.decision == {"mailed": 1}


def test_a_step_without_effect_rides_with_the_next_commit() -> None:
    store = InMemoryStore()
    claim = one_claim(store)
    seen: dict[str, Any] = {}
    pb = Playbook("lookup-then-act")

    @pb.step("lookup", effect=False)
    def lookup(ctx: StepContext) -> int:
        return 7

    @pb.step("act")
    def act(ctx: StepContext) -> int:
        seen.update(store.event(claim.id).steps)
        return ctx.results["lookup"] + 1

    before = store.transactions
    assert run_claimed(store, claim, CFG, registry_of(pb)) == "completed"
    assert seen == {}  # lookup was not committed on its own
    assert store.event(claim.id).steps == {"lookup": 7, "act": 8}
    # load, then act's commit (carrying lookup), then completion
    assert store.transactions - before == 3


def test_completed_steps_are_never_run_again() -> None:
    store = InMemoryStore()
    claim = one_claim(store, steps={"charge": {"charged": 1}})
    ran: list[str] = []
    pb = Playbook("resume")

    @pb.step("charge")
    def charge(ctx: StepContext) -> None:
        ran.append("charge")

    @pb.step("mail")
    def mail(ctx: StepContext) -> Any:
        ran.append("mail")
        return ctx.results["charge"]

    assert run_claimed(store, claim, CFG, registry_of(pb)) == "completed"
    assert ran == ["mail"]
    assert store.event(claim.id).decision == {"charged": 1}


def test_a_worker_whose_lease_expired_commits_nothing() -> None:
    store = InMemoryStore()
    claim = one_claim(store)
    pb = Playbook("slow")

    @pb.step("slow")
    def slow(ctx: StepContext) -> int:
        store.advance(CFG.lease_seconds + 1)  # the lease runs out while the step runs
        return 1

    assert run_claimed(store, claim, CFG, registry_of(pb)) is RunInterrupted.LOST
    row = store.event(claim.id)
    assert row.steps == {}
    assert row.state == EventState.PROCESSING  # the sweeper's to take back
    assert "complete" not in store.calls and "fail" not in store.calls


def test_a_stale_fence_commits_nothing_even_while_the_lease_is_live() -> None:
    store = InMemoryStore()
    claim = one_claim(store)
    store.advance(CFG.lease_seconds + 1)
    with store.begin() as tx:
        store.sweep_expired(tx)
        [again] = store.claim(tx, "worker-2", 10, CFG.lease_seconds)
    assert again.fence == claim.fence + 1
    pb = Playbook("any")
    pb.step("one")(lambda ctx: 1)
    assert run_claimed(store, claim, CFG, registry_of(pb)) is RunInterrupted.LOST
    assert store.event(claim.id).steps == {}
    assert run_claimed(store, again, CFG, registry_of(pb)) == "completed"


def test_a_retryable_failure_goes_back_with_backoff() -> None:
    store = InMemoryStore()
    claim = one_claim(store)
    pb = Playbook("flaky")

    @pb.step("call")
    def call(ctx: StepContext) -> None:
        raise ConnectionError("provider down")

    assert run_claimed(store, claim, CFG, registry_of(pb)) == "received"
    row = store.event(claim.id)
    # first attempt: half of base * 2**0 fixed, half random
    assert store.now + 1.0 <= row.available_at <= store.now + 2.0
    assert row.last_error == "ConnectionError"
    assert row.lease_owner is None


def test_a_retryable_error_may_name_its_delay() -> None:
    store = InMemoryStore()
    claim = one_claim(store)
    pb = Playbook("later")

    @pb.step("call")
    def call(ctx: StepContext) -> None:
        raise RetryableError("rate limited", delay=42.0)

    assert run_claimed(store, claim, CFG, registry_of(pb)) == "received"
    assert store.event(claim.id).available_at == store.now + 42.0


@pytest.mark.parametrize(
    ("error", "attempts_before", "state"),
    [
        (PermanentError("bad account"), 0, "quarantined"),
        (ValueError("listed as permanent"), 0, "quarantined"),
        (ConnectionError("down"), 4, "quarantined"),  # the fifth of five attempts
        (ConnectionError("down"), 3, "received"),
    ],
)
def test_permanent_errors_and_spent_attempts_quarantine(
    error: Exception, attempts_before: int, state: str
) -> None:
    store = InMemoryStore()
    claim = one_claim(store, attempts=attempts_before, max_attempts=5)
    pb = Playbook("fails", permanent=(ValueError,))

    @pb.step("call")
    def call(ctx: StepContext) -> None:
        raise error

    assert run_claimed(store, claim, CFG, registry_of(pb)) == state
    assert store.event(claim.id).state == state


def test_once_per_business_key_runs_the_effect_once() -> None:
    store = InMemoryStore()
    bk = b"\x01" * 32
    store.add_event(business_key_digest=bk)
    store.add_event(business_key_digest=bk)
    with store.begin() as tx:
        first, second = store.claim(tx, "worker-1", 10, CFG.lease_seconds)
    locked: list[int] = []
    pb = Playbook("lock")

    @pb.step("lock", once_per_business_key=True)
    def lock(ctx: StepContext) -> dict[str, Any]:
        locked.append(ctx.event.id)
        return {"locked": True}

    reg = registry_of(pb)
    assert run_claimed(store, first, CFG, reg) == "completed"
    assert run_claimed(store, second, CFG, reg) == "completed"
    assert locked == [first.id]
    row = store.event(second.id)
    assert row.outcome == "duplicate_fact"
    assert row.duplicate_of == first.id
    assert row.steps["lock"] == {"skipped": "duplicate_fact", "first_event_id": first.id}


def test_callbacks_are_written_with_their_step_and_rung_after_completion() -> None:
    store = InMemoryStore()
    store.add_endpoint(1, 11)
    store.add_endpoint(1, 12, event_types=("invoice.paid",))
    store.add_endpoint(1, 13, event_types=("other",))
    claim = one_claim(store)
    rung: list[set[int]] = []
    pb = Playbook("notify")

    @pb.step("send")
    def send(ctx: StepContext) -> str:
        ctx.send("invoice.paid", {"n": 1})
        return "sent"

    @pb.step("after")
    def after(ctx: StepContext) -> None:
        assert {d.endpoint_id for d in store.data.deliveries.values()} == {11, 12}
        assert rung == []  # the doorbell rings only once the event is completed

    assert run_claimed(store, claim, CFG, registry_of(pb), notify=rung.append) == "completed"
    assert rung == [{11, 12}]


def test_a_failing_step_leaves_no_half_written_callbacks() -> None:
    store = InMemoryStore()
    store.add_endpoint(1, 11)
    claim = one_claim(store)
    pb = Playbook("send-then-fail")

    @pb.step("send", effect=False)
    def send(ctx: StepContext) -> None:
        ctx.send("invoice.paid", {})

    @pb.step("boom")
    def boom(ctx: StepContext) -> None:
        raise ConnectionError("down")

    assert run_claimed(store, claim, CFG, registry_of(pb)) == "received"
    assert store.data.deliveries == {}


def test_a_synchronous_event_stores_its_decision_as_the_response() -> None:
    store = InMemoryStore()
    claim = one_claim(store, sync=True)
    pb = Playbook("decide")
    pb.step("decide")(lambda ctx: {"approved": True})
    assert run_claimed(store, claim, CFG, registry_of(pb)) == "completed"
    response = store.event(claim.id).response
    assert response is not None
    assert json.loads(response) == {
        "id": store.event(claim.id).public_id,
        "status": "completed",
        "decision": {"approved": True},
    }


def test_a_body_that_fails_the_source_schema_is_quarantined_before_any_step() -> None:
    store = InMemoryStore()
    claim = one_claim(
        store, body=b'{"amount": "ten"}', source_options={"body_schema": {"amount": "int"}}
    )
    ran: list[str] = []
    pb = Playbook("pay")
    pb.step("pay")(lambda ctx: ran.append("pay"))
    assert run_claimed(store, claim, CFG, registry_of(pb)) == "quarantined"
    assert ran == []


def test_the_heartbeat_keeps_a_long_step_leased() -> None:
    store = InMemoryStore()
    cfg = RunConfig(lease_seconds=0.3)
    claim = one_claim(store, lease=cfg.lease_seconds)
    pb = Playbook("long")

    @pb.step("long")
    def long(ctx: StepContext) -> str:
        # The store's clock moves 0.2 s after each heartbeat: 0.4 s in all, past the first
        # lease of 0.3 s, so the step's commit holds only if every beat extended the lease.
        for beat in (1, 2):
            wait_for(lambda: store.calls.count("extend") >= beat, what="a heartbeat")  # noqa: B023
            store.advance(0.2)
        return "done"

    assert run_claimed(store, claim, cfg, registry_of(pb)) == "completed"


def test_a_step_that_sends_a_callback_it_does_not_declare_is_quarantined_unsent() -> None:
    """A replay's preview lists a step's declared callbacks: the runner holds it to them."""
    store = InMemoryStore()
    store.add_endpoint(1, 11)
    claim = one_claim(store)
    pb = Playbook("declared")

    @pb.step("tell", sends=("invoice.paid",))
    def tell(ctx: StepContext) -> None:
        ctx.send("invoice.paid", {})
        ctx.send("invoice.voided", {})

    assert run_claimed(store, claim, CFG, registry_of(pb)) == EventState.QUARANTINED
    assert store.data.deliveries == {}
