"""Bulk replays: a bounded rate, each event moved at most once, leases, cancelling."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from inbox.infra.config import Settings
from inbox.services.bulk import run_bulk_once
from inbox.services.runtime import Runtime
from inbox.store.reads import bulk as breads
from inbox.store.write import bulk as bstore
from tests.helpers import leases_expired, wait_for
from tests.integration.test_api import make_token, quarantine


@pytest.fixture
def op(engine):
    return make_token(engine, "ops", "operator")


def job_id(engine, public_id: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT id FROM bulk_replays WHERE public_id = :p"), {"p": public_id}
            ).scalar_one()
        )


def replays_per_event(engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT e.public_id, count(a.id) AS n FROM events e LEFT JOIN audit_log a"
                " ON a.subject_kind = 'event' AND a.subject_id = e.id AND a.action = 'replay'"
                " GROUP BY e.public_id"
            )
        )
        return {r.public_id: int(r.n) for r in rows}


def start(client, headers, key: str | None = None, **body):
    extra = {"Idempotency-Key": key} if key else {}
    payload = {"kind": "events", "filter": {"state": "quarantined"}, "rate": 20, **body}
    return client.post("/api/v1/replays", headers={**headers, **extra}, json=payload)


def test_rate_is_bounded_and_each_event_moves_once_even_when_asked_twice(
    client, engine, make_source, op
):
    src = make_source()
    ids = quarantine(engine, src, 30, "evt_q")
    first = start(client, op, key="nightly-1")
    again = start(client, op, key="nightly-1")  # the same request sent twice
    assert first.status_code == 202 and again.status_code == 202
    assert first.json == {"id": first.json["id"], "status": "queued", "total": 30}
    assert again.json["id"] == first.json["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    other = start(client, op, key="nightly-2")  # a second job over the same events
    assert other.status_code == 202 and other.json["id"] != first.json["id"]
    assert other.json["total"] == 30  # matched before the first job ran
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM bulk_replays")).scalar_one() == 2

    started = time.monotonic()
    run = run_bulk_once(Runtime(Settings(), engine), job_id(engine, first.json["id"]))
    elapsed = time.monotonic() - started
    assert run.status == "completed" and run.moved == 30
    assert 1.4 <= elapsed < 5.0, elapsed  # 30 items at 20/s: the last starts at 1.45 s

    second = run_bulk_once(Runtime(Settings(), engine), job_id(engine, other.json["id"]))
    assert second.status == "completed" and second.moved == 0 and second.skipped == 30
    assert replays_per_event(engine) == {i: 1 for i in ids}

    progress = client.get(f"/api/v1/replays/{first.json['id']}", headers=op).json
    assert progress["status"] == "completed"
    assert (progress["total"], progress["done"], progress["moved"], progress["skipped"]) == (
        30,
        30,
        30,
        0,
    )
    assert progress["actor"] == "ops" and progress["finished_at"]
    skipped = client.get(f"/api/v1/replays/{other.json['id']}", headers=op).json
    assert (skipped["done"], skipped["moved"], skipped["skipped"]) == (30, 0, 30)
    # A job made after the first ran finds nothing to do.
    late = start(client, op, key="nightly-3")
    assert late.json["total"] == 0 and late.json["status"] == "completed"


def test_an_event_quarantined_again_is_not_replayed_twice_by_the_second_job(
    client, engine, make_source, op
):
    src = make_source()
    (evt,) = quarantine(engine, src, 1, "evt_r")
    a, b = start(client, op, key="a").json, start(client, op, key="b").json
    assert run_bulk_once(Runtime(Settings(), engine), job_id(engine, a["id"])).moved == 1
    with engine.begin() as conn:  # the replayed event fails again
        conn.execute(
            text("UPDATE events SET state = 'quarantined' WHERE public_id = :p"), {"p": evt}
        )
    assert run_bulk_once(Runtime(Settings(), engine), job_id(engine, b["id"])).moved == 0
    assert replays_per_event(engine) == {evt: 1}


def test_same_key_with_a_different_request_is_422(client, engine, make_source, op):
    quarantine(engine, make_source(), 2, "evt_k")
    assert start(client, op, key="k").status_code == 202
    resp = start(client, op, key="k", rate=5)
    assert resp.status_code == 422 and resp.json["error"]["code"] == "idempotency_key_reused"
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM bulk_replays")).scalar_one() == 1


def test_bad_requests_are_400_and_store_nothing(client, engine, make_source, op):
    quarantine(engine, make_source(), 1, "evt_b")
    for body in (
        {"kind": "widgets"},
        {"kind": "events", "filter": {"state": "completed"}},
        {"kind": "events", "filter": {"endpoint": "ep_1"}},
        {"kind": "deliveries", "filter": {"state": "quarantined"}},
        {"kind": "events", "rate": 0},
        {"kind": "events", "rate": "fast"},
        {"kind": "events", "filter": {"since": "last tuesday"}},
    ):
        resp = client.post("/api/v1/replays", headers=op, json=body)
        assert resp.status_code == 400, body
    resp = client.post("/api/v1/replays", headers=op, data="not json")
    assert resp.status_code == 400
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM bulk_replays")).scalar_one() == 0


def test_a_tenant_token_replays_only_its_tenant(client, engine, make_source):
    a, b = make_source(tenant="ta"), make_source(tenant="tb")
    mine, theirs = quarantine(engine, a, 3, "evt_a"), quarantine(engine, b, 2, "evt_b")
    op_a = make_token(engine, "ops-a", "operator", "ta")
    op_all = make_token(engine, "ops", "operator")
    job = start(client, op_a, rate=100).json
    assert job["total"] == 3
    asked_for_b = start(client, op_a, filter={"tenant": "tb"}).json
    assert asked_for_b["total"] == 0
    run_bulk_once(Runtime(Settings(), engine), job_id(engine, job["id"]))
    counts = replays_per_event(engine)
    assert all(counts[i] == 1 for i in mine) and all(counts[i] == 0 for i in theirs)
    # The all-tenants operator's job is not visible to the tenant's token.
    everyone = start(client, op_all).json
    assert client.get(f"/api/v1/replays/{everyone['id']}", headers=op_a).status_code == 404
    assert client.post(f"/api/v1/replays/{everyone['id']}/cancel", headers=op_a).status_code == 404
    assert client.get(f"/api/v1/replays/{everyone['id']}", headers=op_all).status_code == 200


def test_cancel_stops_a_running_job_partway(client, engine, make_source, op):
    src = make_source()
    quarantine(engine, src, 30, "evt_c")
    job = start(client, op, rate=10).json
    result: list = []
    runner = threading.Thread(
        target=lambda: result.append(
            run_bulk_once(Runtime(Settings(), engine), job_id(engine, job["id"]))
        )
    )
    runner.start()
    wait_for(lambda: client.get(f"/api/v1/replays/{job['id']}", headers=op).json["done"] >= 3)
    cancelled = client.post(f"/api/v1/replays/{job['id']}/cancel", headers=op)
    assert cancelled.status_code == 200 and cancelled.json["status"] == "cancelled"
    runner.join(10)
    assert not runner.is_alive()
    assert result[0].status == "cancelled"
    final = client.get(f"/api/v1/replays/{job['id']}", headers=op).json
    assert final["status"] == "cancelled" and 3 <= final["done"] < 30
    moved = sum(replays_per_event(engine).values())
    assert moved == final["moved"] == final["done"]
    with engine.connect() as conn:
        states = conn.execute(text("SELECT state, count(*) FROM events GROUP BY state")).all()
        cancels = conn.execute(text("SELECT actor FROM audit_log WHERE action = 'cancel'")).all()
    assert dict(states) == {"received": moved, "quarantined": 30 - moved}
    assert [c.actor for c in cancels] == ["ops"]
    # Cancelling again is a no-op; a runner started later does nothing.
    assert client.post(f"/api/v1/replays/{job['id']}/cancel", headers=op).status_code == 200
    assert run_bulk_once(Runtime(Settings(), engine), job_id(engine, job["id"])).processed == 0
    assert sum(replays_per_event(engine).values()) == moved


def test_a_completed_job_cannot_be_cancelled(client, engine, make_source, op):
    quarantine(engine, make_source(), 2, "evt_d")
    job = start(client, op, rate=100).json
    run_bulk_once(Runtime(Settings(), engine), job_id(engine, job["id"]))
    resp = client.post(f"/api/v1/replays/{job['id']}/cancel", headers=op)
    assert resp.status_code == 409 and resp.json["error"]["code"] == "not_cancellable"


def test_two_runners_never_run_one_job_at_once(client, engine, make_source, op):
    quarantine(engine, make_source(), 20, "evt_l")
    job = job_id(engine, start(client, op, rate=40).json["id"])
    barrier = threading.Barrier(2)
    runs: list = []

    def runner(name: str) -> None:
        barrier.wait()
        runs.append(run_bulk_once(Runtime(Settings(), engine), job, owner=name))

    threads = [threading.Thread(target=runner, args=(n,)) for n in ("w1", "w2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(r.processed for r in runs) == [0, 20]
    assert sorted(r.status for r in runs) == ["busy", "completed"]
    assert sum(replays_per_event(engine).values()) == 20


def test_an_expired_lease_is_taken_over_and_a_budget_releases_it(client, engine, make_source, op):
    quarantine(engine, make_source(), 10, "evt_e")
    job = job_id(engine, start(client, op, rate=20).json["id"])
    part = run_bulk_once(Runtime(Settings(), engine), job, budget_seconds=0.2)
    assert part.status == "running" and 0 < part.processed < 10
    with engine.connect() as conn:
        assert breads.due_jobs(conn) == [job]  # released: the sweeper can start it again
    with engine.begin() as conn:  # a runner that died holding the lease
        assert bstore.claim(conn, job, "dead-runner", 0.1) is not None
        assert bstore.claim(conn, job, "another", 30) is None  # a live lease is respected
    wait_for(lambda: leases_expired(engine, "bulk_replays"))
    rest = run_bulk_once(Runtime(Settings(), engine), job, owner="next")
    assert rest.status == "completed" and part.processed + rest.processed == 10
    assert sum(replays_per_event(engine).values()) == 10


def test_bulk_replay_of_failed_deliveries_rings_the_couriers(client, app, engine, make_source, op):
    from inbox.store.write import endpoints as estore

    src = make_source(tenant="acme")
    with engine.begin() as conn:
        ep = estore.create_endpoint(conn, "acme", "https://example.test/", "whsec_x")
        conn.execute(
            text(
                "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_type, body,"
                " state, attempts) SELECT 'msg_' || g, :t, :ep, 'x', '{}', 'failed', 4"
                " FROM generate_series(1, 5) g"
            ),
            {"t": src.tenant_id, "ep": ep.id},
        )
    started: list[int] = []
    app.extensions["inbox"].start_bulk_replay = started.append
    job = client.post(
        "/api/v1/replays",
        headers=op,
        json={"kind": "deliveries", "filter": {"state": "failed"}, "rate": 100},
    ).json
    assert job["total"] == 5 and started == [job_id(engine, job["id"])]
    rung: list[set[int]] = []
    run = run_bulk_once(Runtime(Settings(), engine), started[0], ring_couriers=rung.append)
    assert run.moved == 5 and set().union(*rung) == {ep.id}
    with engine.connect() as conn:
        states = conn.execute(text("SELECT DISTINCT state FROM deliveries")).scalars().all()
    assert states == ["pending"]
