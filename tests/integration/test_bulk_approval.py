"""The two-person rule: a large bulk replay waits until a second operator approves it."""

from __future__ import annotations

import re
import threading

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from inbox.infra.config import Settings
from inbox.services.bulk import run_bulk_once
from inbox.services.runtime import Runtime
from inbox.store.reads import bulk as breads
from tests.integration.test_api import make_token, quarantine
from tests.integration.test_bulk_replay import job_id, replays_per_event
from tests.integration.test_ui import CSRF, grab, new_token, sign_in
from web import create_app

MIN = 100  # INBOX_BULK_APPROVAL_MIN's default


@pytest.fixture
def ops(engine) -> dict[str, dict[str, str]]:
    return {
        "alice": make_token(engine, "alice", "operator"),
        "bob": make_token(engine, "bob", "operator"),
        "carol": make_token(engine, "carol", "operator"),
        "viewer": make_token(engine, "watcher", "viewer"),
    }


def start(client, headers, key: str = "k1"):
    body = {"kind": "events", "filter": {"state": "quarantined"}, "rate": 1000}
    resp = client.post("/api/v1/replays", headers={**headers, "Idempotency-Key": key}, json=body)
    assert resp.status_code == 202, resp.json
    return resp.json


def audit(engine, job: str) -> list[tuple[str, str, dict]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT a.actor, a.action, a.detail FROM audit_log a JOIN bulk_replays b"
                " ON a.subject_kind = 'bulk_replay' AND a.subject_id = b.id"
                " WHERE b.public_id = :p ORDER BY a.id"
            ),
            {"p": job},
        )
        return [(r.actor, r.action, r.detail) for r in rows]


def test_more_than_the_threshold_waits_for_a_second_operator(client, engine, make_source, ops):
    ids = quarantine(engine, make_source(), MIN + 1, "evt_big")
    job = start(client, ops["alice"])
    assert job["status"] == "awaiting_approval" and job["total"] == MIN + 1
    # Nothing runs it before approval: not a runner, not the sweeper.
    assert run_bulk_once(Runtime(Settings(), engine), job_id(engine, job["id"])).processed == 0
    with engine.connect() as conn:
        assert job_id(engine, job["id"]) not in breads.due_jobs(conn)
    assert sum(replays_per_event(engine).values()) == 0

    url = f"/api/v1/replays/{job['id']}/approve"
    own = client.post(url, headers=ops["alice"])
    assert own.status_code == 403 and own.json["error"]["code"] == "forbidden"
    assert client.post(url, headers=ops["viewer"]).status_code == 403
    assert client.get(f"/api/v1/replays/{job['id']}", headers=ops["alice"]).json["status"] == (
        "awaiting_approval"
    )

    ok = client.post(url, headers=ops["bob"], json={"note": "incident 42, checked the filter"})
    assert ok.status_code == 200, ok.json
    assert ok.json["status"] == "queued" and ok.json["reviewer"] == "bob"
    assert ok.json["actor"] == "alice" and ok.json["reviewed_at"]
    assert client.post(url, headers=ops["carol"]).status_code == 409  # approved already

    run = run_bulk_once(Runtime(Settings(), engine), job_id(engine, job["id"]))
    assert run.status == "completed" and run.moved == MIN + 1
    assert replays_per_event(engine) == {i: 1 for i in ids}

    steps = audit(engine, job["id"])
    assert [(a, act) for a, act, _ in steps] == [
        ("alice", "bulk_replay"),
        ("bob", "approve"),
        ("inbox", "complete"),
    ]
    assert steps[2][2] == {
        "public_id": job["id"],
        "requested_by": "alice",
        "approved_by": "bob",
        "total": MIN + 1,
        "moved": MIN + 1,
        "skipped": 0,
    }
    assert steps[0][2]["status"] == "awaiting_approval" and steps[0][2]["requested_by"] == "alice"
    assert steps[1][2]["requested_by"] == "alice" and steps[1][2]["approved_by"] == "bob"
    assert steps[1][2]["note"] == "incident 42, checked the filter"
    with engine.connect() as conn:
        items = conn.execute(
            text("SELECT actor, detail FROM audit_log WHERE subject_kind = 'event'")
        ).all()
    assert len(items) == MIN + 1
    assert {(r.actor, r.detail["approved_by"], r.detail["bulk_replay"]) for r in items} == {
        ("alice", "bob", job["id"])
    }


def test_a_rejected_replay_never_runs(client, engine, make_source, ops):
    quarantine(engine, make_source(), MIN + 5, "evt_rej")
    job = start(client, ops["alice"])
    resp = client.post(
        f"/api/v1/replays/{job['id']}/reject", headers=ops["bob"], json={"note": "too broad"}
    )
    assert resp.status_code == 200 and resp.json["status"] == "rejected"
    assert resp.json["reviewer"] == "bob" and resp.json["finished_at"]
    again = client.post(f"/api/v1/replays/{job['id']}/approve", headers=ops["carol"])
    assert again.status_code == 409 and again.json["error"]["code"] == "not_awaiting_approval"
    assert run_bulk_once(Runtime(Settings(), engine), job_id(engine, job["id"])).processed == 0
    assert sum(replays_per_event(engine).values()) == 0
    reject = audit(engine, job["id"])[-1]
    assert reject[:2] == ("bob", "reject")
    assert reject[2]["requested_by"] == "alice" and reject[2]["rejected_by"] == "bob"
    assert reject[2]["note"] == "too broad"
    bad = client.post(f"/api/v1/replays/{job['id']}/reject", headers=ops["bob"], json={"note": 5})
    assert bad.status_code == 400
    missing = client.post("/api/v1/replays/rpl_nope/approve", headers=ops["bob"])
    assert missing.status_code == 404


def test_up_to_the_threshold_runs_as_today(client, engine, make_source, ops):
    quarantine(engine, make_source(), MIN, "evt_small")
    job = start(client, ops["alice"])
    assert job["status"] == "queued"
    assert run_bulk_once(Runtime(Settings(), engine), job_id(engine, job["id"])).moved == MIN
    resp = client.post(f"/api/v1/replays/{job['id']}/approve", headers=ops["bob"])
    assert resp.status_code == 409


def test_two_approvers_at_once_approve_it_once(client, app, engine, make_source, ops):
    quarantine(engine, make_source(), MIN + 1, "evt_race")
    job = start(client, ops["alice"])
    barrier = threading.Barrier(2)
    codes: list[int] = []

    def approve(who: str) -> None:
        c = app.test_client()
        barrier.wait()
        codes.append(c.post(f"/api/v1/replays/{job['id']}/approve", headers=ops[who]).status_code)

    threads = [threading.Thread(target=approve, args=(w,)) for w in ("bob", "carol")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(codes) == [200, 409]
    assert [act for _, act, _ in audit(engine, job["id"])] == ["bulk_replay", "approve"]


def test_the_console_shows_and_does_the_same(client, app, engine, make_source):
    quarantine(engine, make_source(tenant="ta", name="billing"), MIN + 1, "evt_ui")
    alice, bob = new_token(engine, "alice", "operator"), new_token(engine, "bob", "operator")
    sign_in(client, alice)
    confirm = client.get("/ui/replays/new?tenant=ta").get_data(as_text=True)
    assert 'id="needs-approval"' in confirm
    form = {"csrf": grab(CSRF, confirm), "tenant": "ta", "rate": "1000"}
    created = client.post(
        "/ui/replays", data={**form, "key": grab(r'name="key" value="([^"]+)"', confirm)}
    )
    job = created.headers["Location"].rsplit("/", 1)[1]
    page = client.get(f"/ui/replays/{job}").get_data(as_text=True)
    assert 'id="awaiting-approval"' in page and 'id="own-request"' in page
    assert 'id="approve"' not in page  # the requester is offered no approve button
    csrf = grab(CSRF, page)
    own = client.post(f"/ui/replays/{job}/approve", data={"csrf": csrf})
    assert own.status_code == 403

    second = app.test_client()
    sign_in(second, bob)
    page = second.get(f"/ui/replays/{job}").get_data(as_text=True)
    assert 'id="approve"' in page and 'id="reject"' in page
    done = second.post(
        f"/ui/replays/{job}/approve", data={"csrf": grab(CSRF, page), "note": "ok by me"}
    )
    assert done.status_code == 302
    shown = second.get(f"/ui/replays/{job}").get_data(as_text=True)
    assert re.search(r'id="reviewed-by">bob', shown) and 'id="review-form"' not in shown
    assert client.get(f"/ui/replays/{job}/progress").json["status"] == "queued"


def test_the_cli_asks_for_approval_and_a_second_operator_gives_it(engine, make_source):
    src = make_source(tenant="tcli")
    quarantine(engine, src, MIN + 2, "evt_cli")
    quarantine(engine, make_source(tenant="tcli2"), MIN + 1, "evt_other")
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    asked = run("replay", "--quarantined", "--tenant", "tcli", "--actor", "alice")
    assert "awaiting_approval" in asked and "--approve" in asked
    job = grab(r"bulk replay (rpl_\w+)", asked)
    assert sum(replays_per_event(engine).values()) == 0
    waiting = run("replay", "--awaiting")
    assert job in waiting and "alice" in waiting and "REQUESTED BY" in waiting

    own = runner.invoke(main, ["replay", "--approve", job, "--actor", "alice"])
    assert own.exit_code != 0 and "different operator" in own.output
    done = run("replay", "--approve", job, "--actor", "bob", "--note", "checked")
    assert "queued by bob; requested by alice" in done and "replayed 102" in done
    counts = replays_per_event(engine)
    assert sum(counts.values()) == MIN + 2
    assert all(counts[f"evt_cli{i}"] == 1 for i in range(1, MIN + 3))

    other = grab(
        r"bulk replay (rpl_\w+)",
        run("replay", "--quarantined", "--tenant", "tcli2", "--actor", "alice"),
    )
    assert "rejected by carol" in run("replay", "--reject", other, "--actor", "carol")
    assert sum(replays_per_event(engine).values()) == MIN + 2
    too_many = runner.invoke(main, ["replay", *[f"evt_other{i}" for i in range(1, MIN + 2)]])
    assert too_many.exit_code != 0 and "second" in too_many.output


def test_the_threshold_is_the_configured_one(engine, settings, make_source, ops):
    quarantine(engine, make_source(), 3, "evt_cfg")
    low = Settings(database_url=settings.database_url, bulk_approval_min=2)
    app = create_app(low, engine=engine, doorbell=lambda: None, route_cache_seconds=0)
    job = start(app.test_client(), ops["alice"])
    assert (job["status"], job["total"]) == ("awaiting_approval", 3)
