"""Playbooks with outside effects run in lockstep across a claimed batch, on PostgreSQL: one
commit per step for the batch, and a lost lease, a crash between the steps or a failing step
losing and doubling nothing. The outside system is the sink table (one row per call, keyed by
the step key), written on its own connection."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from inbox import Playbook, StepContext
from inbox.domain.playbooks import Registry
from inbox.infra.config import Settings
from inbox.services.drain import claim_batch, drain_once, sweep_once
from inbox.services.runtime import Runtime
from tests.helpers import (
    body_of,
    events_by_state,
    hmac_headers,
    leases_expired,
    sink_rows,
    wait_for,
)
from tests.sink_playbooks import sink

pytestmark = pytest.mark.usefixtures("sink_table")


class Crash(BaseException):
    """The worker process dies here: nothing after it runs in this process."""


@pytest.fixture(params=[1, 8], ids=["one-at-a-time", "pooled"])
def lsettings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    return Settings(
        database_url=settings.database_url,
        batch_size=100,
        lease_seconds=30,
        retry_base_seconds=0.01,
        step_concurrency=request.param,
    )


def public_ids(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return [r.public_id for r in conn.execute(text("SELECT public_id FROM events ORDER BY id"))]


def send(client: Any, make_source: Any, engine: Engine, n: int) -> list[str]:
    src = make_source()
    for i in range(n):
        body = body_of({"n": i})
        reply = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, f"k{i}"))
        assert reply.status_code == 202
    return public_ids(engine)


def registry(pb: Playbook) -> Registry:
    reg = Registry()
    reg.register(pb)
    return reg


def calls(engine: Engine) -> Counter[str]:
    return Counter(r.step_key for r in sink_rows(engine))


def keys(ids: list[str], steps: str) -> Counter[str]:
    return Counter({f"{i}.{s}": 1 for i in ids for s in steps})


def test_a_two_step_batch_commits_once(client, make_source, engine, lsettings) -> None:
    ids = send(client, make_source, engine, 30)
    pb = Playbook("two")
    pb.step("check", effect=False)(lambda ctx: {"checked": True})

    @pb.step("a")
    def a(ctx: StepContext) -> dict[str, Any]:
        sink(ctx)
        return {"applied": True}

    commits: list[int] = []

    def count(_conn: Any) -> None:
        commits.append(1)

    event.listen(engine, "commit", count)
    try:
        result = drain_once(Runtime(lsettings, engine), reg=registry(pb))
    finally:
        event.remove(engine, "commit", count)
    assert result.states == {"completed": 30}
    assert len(commits) == 2  # the claim, then every recovery point with every completion
    assert calls(engine) == keys(ids, "a")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM steps")).scalar_one() == 60


def test_a_lease_stolen_mid_batch_stops_that_event_alone(
    client, make_source, engine, lsettings
) -> None:
    ids = send(client, make_source, engine, 10)
    victim = ids[4]
    pb = Playbook("two")

    @pb.step("a")
    def a(ctx: StepContext) -> None:
        if ctx.event.public_id == victim and ctx.event.attempt == 1:
            with engine.begin() as conn:  # its lease runs out; the sweep takes it back
                conn.execute(
                    text(
                        "UPDATE events SET lease_expires_at = now() - interval '1 second'"
                        " WHERE public_id = :p"
                    ),
                    {"p": victim},
                )
            assert sweep_once(engine).requeued == 1
        sink(ctx)

    pb.step("b")(sink)
    result = drain_once(Runtime(lsettings, engine), reg=registry(pb))
    assert result.states == {"completed": 9, "lost": 1}
    assert f"{victim}.b" not in calls(engine)
    with engine.connect() as conn:
        recorded = conn.execute(
            text(
                "SELECT count(*) FROM steps s JOIN events e ON e.id = s.event_id"
                " WHERE e.public_id = :p"
            ),
            {"p": victim},
        ).scalar_one()
    assert recorded == 0  # its lapsed lease committed nothing
    assert drain_once(Runtime(lsettings, engine), reg=registry(pb)).states == {"completed": 1}
    assert events_by_state(engine) == {"completed": 10}
    # one row per step of every event, but the victim's first step, called again by its key
    assert calls(engine) == keys(ids, "ab") + Counter({f"{victim}.a": 1})


def test_a_crash_between_the_steps_reruns_only_the_second(
    client, make_source, engine, lsettings
) -> None:
    ids = send(client, make_source, engine, 20)
    crashing = [True]
    pb = Playbook("two")
    pb.step("a")(sink)

    @pb.step("b")
    def b(ctx: StepContext) -> None:
        if crashing[0]:
            raise Crash()
        sink(ctx)

    with pytest.raises(Crash):
        drain_once(Runtime(replace(lsettings, lease_seconds=1), engine), reg=registry(pb))
    assert calls(engine) == keys(ids, "a")
    crashing[0] = False
    wait_for(lambda: leases_expired(engine), 10, "the crashed worker's leases ran out")
    assert sweep_once(engine).requeued == 20
    assert drain_once(Runtime(lsettings, engine), reg=registry(pb)).states == {"completed": 20}
    assert calls(engine) == keys(ids, "ab")  # every effect row once: a was not run again


def test_a_step_that_raises_retries_that_event_alone(
    client, make_source, engine, lsettings
) -> None:
    ids = send(client, make_source, engine, 10)
    bad = ids[3]
    pb = Playbook("two")
    pb.step("a")(sink)

    @pb.step("b")
    def b(ctx: StepContext) -> None:
        if ctx.event.public_id == bad and ctx.event.attempt == 1:
            raise RuntimeError("the outside system said no")
        sink(ctx)

    result = drain_once(Runtime(lsettings, engine), reg=registry(pb))
    assert result.states == {"completed": 9, "received": 1}
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT attempts, last_error_class FROM events WHERE public_id = :p"), {"p": bad}
        ).one()
    assert tuple(row) == (1, "RuntimeError")
    wait_for(
        lambda: drain_once(Runtime(lsettings, engine), reg=registry(pb)).states == {"completed": 1},
        10,
        "the retry completes",
    )
    assert calls(engine) == keys(ids, "ab")


def test_a_batch_writes_every_callback_in_one_statement(
    client, make_source, engine, lsettings
) -> None:
    """The commit that ends a batch writes the callbacks of all its events at once: one
    read of the endpoints, then one statement for the intents and the deliveries, whatever
    the number of events; each delivery once, held for the paused endpoint."""
    from tests.integration.test_callbacks import endpoint

    ids = send(client, make_source, engine, 30)
    with engine.connect() as conn:
        tenant = conn.execute(text("SELECT name FROM tenants ORDER BY id DESC")).scalar_one()
    live = endpoint(engine, tenant, "https://receiver.example/a")
    paused = endpoint(engine, tenant, "https://receiver.example/b", paused=True)
    skip = endpoint(engine, tenant, "https://receiver.example/c", event_types=["other"])
    pb = Playbook("two")

    @pb.step("a")
    def a(ctx: StepContext) -> None:
        sink(ctx)
        ctx.send("order.paid", {"n": 1})
        ctx.send("order.paid", {"n": 2})

    seen: list[str] = []

    def statement(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        seen.append(" ".join(sql.split()))

    event.listen(engine, "before_cursor_execute", statement)
    try:
        result = drain_once(Runtime(lsettings, engine), reg=registry(pb))
    finally:
        event.remove(engine, "before_cursor_execute", statement)
    assert result.states == {"completed": 30}
    written = [s for s in seen if "INSERT INTO deliveries" in s]
    assert len(written) == 1 and "INSERT INTO callback_intents" in written[0]
    assert not any(s.startswith("INSERT INTO callback_intents") for s in seen)
    assert sum("FROM endpoints WHERE tenant_id" in s for s in seen) == 1
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT public_id, endpoint_id, state FROM deliveries ORDER BY id")
        ).all()
        owed = conn.execute(text("SELECT count(*) FROM callback_intents")).scalar_one()
    assert len(rows) == owed == 30 * 2 * 2 and len({r.public_id for r in rows}) == len(rows)
    states = Counter((r.endpoint_id, r.state) for r in rows)
    assert states == {(live.id, "pending"): 60, (paused.id, "held"): 60}
    assert skip.id not in {r.endpoint_id for r in rows}
    assert calls(engine) == keys(ids, "a")


class Counting:
    """The PostgreSQL work store, counting its claims and lease extensions."""

    def __init__(self, engine: Engine) -> None:
        from inbox.services.wiring import work_store

        self.store = work_store(engine)
        self.claims = 0
        self.extends = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def claim(self, *args: Any) -> Any:
        self.claims += 1
        return self.store.claim(*args)

    def extend(self, *args: Any) -> Any:
        self.extends += 1
        return self.store.extend(*args)


def test_a_full_batch_claims_the_next_while_its_steps_run(
    client, make_source, engine, lsettings
) -> None:
    """``prefetch``: the next batch is claimed while a full one runs (its step waits for
    that claim), handed on as ``claimed``, and every event runs once; a batch that is not
    full claims none ahead."""
    ids = send(client, make_source, engine, 25)
    store = Counting(engine)
    pb = Playbook("two")
    pb.step("check", effect=False)(lambda ctx: {"checked": True})

    @pb.step("a")
    def a(ctx: StepContext) -> dict[str, Any]:
        wait_for(lambda: store.claims >= 2, 30, "the next batch claimed while this one runs")
        sink(ctx)
        return {"applied": True}

    small = replace(lsettings, batch_size=10)
    rt, reg = Runtime(small, engine), registry(pb)
    with ThreadPoolExecutor(1) as ahead:
        first = drain_once(rt, reg=reg, store=store, prefetch=ahead)  # type: ignore[arg-type]
        assert first.claimed == 10 and first.next is not None
        second = drain_once(rt, reg=reg, store=store, claimed=first.next.result(), prefetch=ahead)  # type: ignore[arg-type]
        assert second.claimed == 10 and second.next is not None
        third = drain_once(rt, reg=reg, store=store, claimed=second.next.result(), prefetch=ahead)  # type: ignore[arg-type]
        assert third.claimed == 5 and third.next is None  # not full: nothing claimed ahead
    assert store.claims == 3
    assert events_by_state(engine) == {"completed": 25}
    assert calls(engine) == keys(ids, "a")


def test_a_batch_claimed_ahead_renews_its_leases_from_its_claim(
    client, make_source, engine, lsettings
) -> None:
    """A batch that waited behind a long one renews its leases a third of a lease after
    its claim, not after its start: it cannot run out of lease unseen."""
    send(client, make_source, engine, 12)
    pb = Playbook("one")
    pb.step("a")(lambda ctx: {"applied": True})
    small = replace(lsettings, batch_size=6)
    rt, reg = Runtime(small, engine), registry(pb)
    aged = Counting(engine)
    claimed = claim_batch(aged, "w", small)  # type: ignore[arg-type]
    waited = replace(claimed, at=claimed.at - small.lease_seconds / 2)
    assert drain_once(rt, reg=reg, store=aged, claimed=waited).claimed == 6  # type: ignore[arg-type]
    assert aged.extends >= 1
    # A batch just claimed is not renewed before a third of its lease.
    fresh = Counting(engine)
    assert drain_once(rt, reg=reg, store=fresh).claimed == 6  # type: ignore[arg-type]
    assert fresh.extends == 0
    assert events_by_state(engine) == {"completed": 12}
