"""Draining, recovery points, leases, quarantine and fairness, via the plain functions."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import Engine, text

import tests.sink_playbooks  # noqa: F401  (registers the test playbooks)
from inbox.domain.errors import LeaseLost
from inbox.infra.config import Settings
from inbox.services.drain import drain_once, sweep_once
from inbox.services.runtime import Runtime
from inbox.store.write import queue
from tests.helpers import (
    body_of,
    events_by_state,
    hmac_headers,
    insert_pending,
    leases_expired,
    sink_rows,
    wait_for,
)

pytestmark = pytest.mark.usefixtures("sink_table")


def ids(engine: Engine) -> list[int]:
    """The events' ids in the order they were received (ids carry their day: not 1, 2, 3)."""
    with engine.connect() as conn:
        return [r.id for r in conn.execute(text("SELECT id FROM events ORDER BY id"))]


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    return Settings(
        database_url=settings.database_url,
        batch_size=100,
        lease_seconds=30,
        retry_base_seconds=0.01,
    )


def send(client, src, payload, key, **headers):
    body = body_of(payload)
    return client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key, **headers))


def drain_all(engine, wsettings) -> None:
    def drained() -> bool:
        if drain_once(Runtime(wsettings, engine)).claimed:
            return False
        with engine.connect() as conn:
            pending = conn.execute(
                text("SELECT count(*) FROM events WHERE state IN ('received','processing')")
            ).scalar_one()
        return not pending

    wait_for(drained, 240, "every event drained")  # 1000 events on a loaded machine


def one(engine, sql: str):
    with engine.connect() as conn:
        return conn.execute(text(sql)).first()


def test_record_playbook_completes_with_its_step_committed(client, make_source, engine, wsettings):
    src = make_source()
    assert send(client, src, {"a": 1}, "k").status_code == 202
    result = drain_once(Runtime(wsettings, engine))
    assert result.claimed == 1 and result.states["completed"] == 1
    ev = one(engine, "SELECT * FROM events")
    assert ev.state == "completed" and ev.attempts == 1 and ev.outcome == "completed"
    assert ev.decision == {"decision": "recorded", "event_type": None}
    assert ev.lease_owner is None and ev.finished_at is not None
    assert one(engine, "SELECT name FROM steps").name == "record"


def test_retry_resumes_at_the_first_incomplete_step(client, make_source, engine, wsettings):
    src = make_source(event_type_path="type")
    send(client, src, {"type": "two.step", "fail_notify_times": 2}, "k")
    drain_all(engine, wsettings)
    rows = sink_rows(engine)
    assert [r.step for r in rows] == ["charge", "notify", "notify", "notify"]
    ev = one(engine, "SELECT * FROM events")
    assert ev.state == "completed" and ev.attempts == 3
    # the outside system saw one stable key per step, the same on every attempt
    assert {r.step_key for r in rows if r.step == "notify"} == {f"{ev.public_id}.notify"}
    assert rows[0].step_key == f"{ev.public_id}.charge"


def test_poison_is_quarantined_after_exactly_max_attempts_while_healthy_complete(
    client, make_source, engine, wsettings
):
    src = make_source(event_type_path="type", max_attempts=3)
    send(client, src, {"type": "flaky", "poison": True}, "poison")
    insert_pending(engine, src, 1000, {"type": "flaky"})  # the healthy ones, behind it
    drain_all(engine, wsettings)
    assert events_by_state(engine) == {"completed": 1000, "quarantined": 1}
    bad = one(engine, "SELECT * FROM events WHERE state = 'quarantined'")
    assert bad.attempts == 3 and bad.last_error_class == "RuntimeError"
    assert bad.last_error_message == "poison event" and bad.finished_at is not None
    poison_calls = [r for r in sink_rows(engine) if r.event == bad.public_id]
    assert len(poison_calls) == 3
    assert len(sink_rows(engine)) == 1003


@pytest.mark.parametrize("flag", ["permanent", "keyerror"])
def test_permanent_errors_quarantine_at_once(client, make_source, engine, wsettings, flag):
    src = make_source(event_type_path="type")
    send(client, src, {"type": "flaky", flag: True}, "k")
    drain_all(engine, wsettings)
    ev = one(engine, "SELECT * FROM events")
    assert ev.state == "quarantined" and ev.attempts == 1


def test_body_failing_the_source_schema_is_quarantined_not_retried(
    client, make_source, engine, wsettings
):
    src = make_source(body_schema={"account": "str", "amount": "int"})
    send(client, src, {"account": "a", "amount": "lots"}, "k")
    drain_all(engine, wsettings)
    ev = one(engine, "SELECT * FROM events")
    assert ev.state == "quarantined" and ev.attempts == 1
    assert ev.last_error_class == "PermanentError" and "amount" in ev.last_error_message


def test_same_business_fact_under_two_event_ids_has_one_effect(
    client, make_source, engine, wsettings
):
    src = make_source(event_type_path="type", business_key_paths=["account"])
    send(client, src, {"type": "sim.swap", "account": "acct-1", "from": "a"}, "k1")
    send(client, src, {"type": "sim.swap", "account": "acct-1", "from": "b"}, "k2")
    send(client, src, {"type": "sim.swap", "account": "acct-2"}, "k3")
    drain_all(engine, wsettings)
    assert [r.step for r in sink_rows(engine)] == ["deny", "deny"]
    first, second, third = (
        one(engine, f"SELECT * FROM events WHERE id = {i}") for i in ids(engine)
    )
    assert first.outcome == "completed" and third.outcome == "completed"
    assert second.state == "completed" and second.outcome == "duplicate_fact"
    assert second.duplicate_of == first.id


def test_expired_lease_cannot_commit_over_the_next_owner(client, make_source, engine, wsettings):
    src = make_source()
    send(client, src, {"a": 1}, "k")
    with engine.begin() as conn:
        [old] = queue.claim(conn, "old", 10, 0.2)
    wait_for(lambda: leases_expired(engine))
    # the lease has expired: even before anyone else claims, the old owner commits nothing
    with pytest.raises(LeaseLost), engine.begin() as conn:
        queue.record_steps(conn, old, {"x": 1}, 30)
    assert sweep_once(engine).requeued == 1
    with engine.begin() as conn:
        [new] = queue.claim(conn, "new", 10, 30)
    assert new.fence == old.fence + 1
    for attempt in (
        lambda conn: queue.record_steps(conn, old, {"x": 1}, 30),
        lambda conn: queue.complete(conn, old, "completed", {}, None, None),
        lambda conn: queue.fail(conn, old, RuntimeError("x"), False, 0),
    ):
        with pytest.raises(LeaseLost), engine.begin() as conn:
            attempt(conn)
    with engine.begin() as conn:
        queue.record_steps(conn, new, {"x": 2}, 30)
        queue.complete(conn, new, "completed", {"by": "new"}, None, None)
    ev = one(engine, "SELECT * FROM events")
    assert ev.state == "completed" and ev.decision == {"by": "new"} and ev.attempts == 2
    assert one(engine, "SELECT result FROM steps").result == 2


def test_a_crash_looping_event_still_reaches_quarantine(client, make_source, engine):
    src = make_source(max_attempts=2)
    send(client, src, {"a": 1}, "k")
    for expected in ("received", "quarantined"):
        with engine.begin() as conn:
            assert len(queue.claim(conn, "dies", 10, 0.05)) == 1  # ...and the worker dies
        wait_for(lambda: leases_expired(engine))
        sweep_once(engine)
        assert one(engine, "SELECT state FROM events").state == expected
    assert one(engine, "SELECT attempts FROM events").attempts == 2


def test_one_tenants_backlog_does_not_starve_another(make_source, engine, wsettings):
    big, small = make_source(), make_source()
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL statement_timeout = 0"))
        conn.execute(
            text(
                "INSERT INTO events (public_id, tenant_id, source_id, content_type, body,"
                " body_sha256, response_status, response_body, received_at, available_at)"
                " SELECT 'b' || g, :t, :s, 'application/json', '{}', '\\x00', 202, '',"
                " now() - interval '1 hour', now() - interval '1 hour'"
                " FROM generate_series(1, 100000) g"
            ),
            {"t": big.tenant_id, "s": big.id},
        )
        conn.execute(
            text(
                "INSERT INTO events (public_id, tenant_id, source_id, content_type, body,"
                " body_sha256, response_status, response_body)"
                " VALUES ('lonely', :t, :s, 'application/json', '{}', '\\x00', 202, '')"
            ),
            {"t": small.tenant_id, "s": small.id},
        )
    result = drain_once(Runtime(wsettings, engine))
    assert result.claimed == 100
    assert one(engine, "SELECT state FROM events WHERE public_id = 'lonely'").state == "completed"


def test_one_business_key_at_a_time_in_received_order(client, make_source, engine, wsettings):
    src = make_source(business_key_paths=["account"], serialize_by_business_key=True)
    for i in range(3):
        send(client, src, {"account": "acct-1", "n": i}, f"k{i}")
    send(client, src, {"account": "acct-2"}, "other")
    with engine.begin() as conn:
        first = queue.claim(conn, "w", 10, 30)
    e1, e2, e3, e4 = ids(engine)
    assert [c.id for c in first] == [e1, e4]  # acct-1's first event, and acct-2's in parallel
    with engine.begin() as conn:
        assert queue.claim(conn, "w2", 10, 30) == []  # acct-1's next waits for the first
        for c in first:
            queue.complete(conn, c, "completed", {}, None, None)
    order = []
    for _ in range(3):
        with engine.begin() as conn:
            claims = queue.claim(conn, "w", 10, 30)
            order += [c.id for c in claims]
            for c in claims:
                queue.complete(conn, c, "completed", {}, None, None)
    assert order == [e2, e3]


def test_prefer_wait_returns_the_decision_and_in_flight_retry_gets_409(
    client, make_source, engine, wsettings
):
    src = make_source()
    box: dict[str, object] = {}

    def original() -> None:
        box["resp"] = send(client, src, {"a": 1}, "sync-1", Prefer="wait=10")

    t = threading.Thread(target=original)
    t.start()
    wait_for(lambda: one(engine, "SELECT count(*) AS n FROM events").n > 0)
    in_flight = send(client, src, {"a": 1}, "sync-1")
    assert in_flight.status_code == 409 and in_flight.headers["Retry-After"] == "1"
    drain_once(Runtime(wsettings, engine))
    t.join(15)
    resp = box["resp"]
    assert resp.status_code == 200
    assert resp.json["status"] == "completed" and resp.json["decision"]["decision"] == "recorded"
    replay = send(client, src, {"a": 1}, "sync-1")
    assert replay.status_code == 200 and replay.data == resp.data
    assert replay.headers["Idempotent-Replayed"] == "true"


def test_prefer_wait_times_out_with_the_usual_202(client, make_source, engine):
    src = make_source()
    start = time.monotonic()
    resp = send(client, src, {"a": 1}, "slow", Prefer="respond-async, wait=1")
    assert resp.status_code == 202 and 0.9 < time.monotonic() - start < 5


def test_batched_completion_is_fenced_too(client, make_source, engine):
    from inbox.store.write import batch

    src = make_source()
    send(client, src, {"a": 1}, "k1")
    send(client, src, {"a": 2}, "k2")
    with engine.begin() as conn:
        old = queue.claim(conn, "old", 10, 0.2)
        loaded = batch.load_many(conn, old)
    e1, e2 = ids(engine)
    assert sorted(loaded) == [e1, e2]
    wait_for(lambda: leases_expired(engine))
    sweep_once(engine)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE events SET available_at = now() + interval '1 hour' WHERE id = :id"),
            {"id": e2},
        )
        [new] = queue.claim(conn, "new", 10, 30)  # only event 1 is taken over
    assert new.id == e1
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE events SET state = 'processing', fence = fence + 1,"
                " lease_expires_at = now() + interval '30 seconds' WHERE id = :id"
            ),
            {"id": e2},
        )
    completions = [
        batch.Completion(c, {"record": {"by": "old"}}, "completed", {"by": "old"}, None)
        for c in old
    ]
    with engine.begin() as conn:
        assert batch.complete_many(conn, completions) == set()  # both leases are gone
    fresh = batch.Completion(new, {"record": {"by": "new"}}, "completed", {"by": "new"}, None)
    with engine.begin() as conn:
        assert batch.complete_many(conn, [fresh]) == {e1}
    with engine.connect() as conn:
        steps = conn.execute(text("SELECT event_id, result FROM steps")).fetchall()
    assert [(s.event_id, s.result) for s in steps] == [(e1, {"by": "new"})]


def test_effect_free_playbooks_complete_as_a_batch(client, make_source, engine, wsettings):
    from sqlalchemy import event

    src = make_source()
    for i in range(30):
        send(client, src, {"n": i}, f"k{i}")
    commits: list[int] = []

    def count(_conn) -> None:
        commits.append(1)

    event.listen(engine, "commit", count)
    try:
        result = drain_once(Runtime(wsettings, engine))
    finally:
        event.remove(engine, "commit", count)
    assert result.states == {"completed": 30}
    assert events_by_state(engine) == {"completed": 30}
    assert len(commits) == 2  # one claim, one completion: not two commits per event


def test_a_step_longer_than_the_lease_keeps_it(client, make_source, engine, settings):
    """A 2.5 s step under a 0.9 s lease: the heartbeat extends it, sweeps take nothing."""
    src = make_source(event_type_path="type")
    send(client, src, {"type": "flaky", "sleep": 2.5}, "slow")
    short = Settings(database_url=settings.database_url, lease_seconds=1, retry_base_seconds=0.01)
    sweeps: list[tuple[float, int]] = []  # (seconds since the drain began, requeued)
    done = threading.Event()
    began = time.monotonic()

    def sweeper() -> None:
        while not done.is_set():
            requeued = sweep_once(engine).requeued
            sweeps.append((time.monotonic() - began, requeued))
            done.wait(0.2)  # a sweep every 0.2 s until the drain is over

    t = threading.Thread(target=sweeper)
    t.start()
    try:
        result = drain_once(Runtime(short, engine))
    finally:
        done.set()
        t.join()
    assert result.states == {"completed": 1}
    # Swept past the lease's first expiry (1 s) and after, never requeued: however slow a
    # loaded machine makes each sweep, one ran where a lease without a heartbeat had lapsed.
    assert sum(n for _, n in sweeps) == 0
    assert any(at > 1.5 for at, _ in sweeps), sweeps
    ev = one(engine, "SELECT * FROM events")
    assert ev.state == "completed" and ev.attempts == 1
    assert len(sink_rows(engine)) == 1
