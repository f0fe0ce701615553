"""Ordered lanes on the real database: a quarantined event blocks its lane until an
operator replays it (it runs first, then the rest) or skips it (audited, with a reason,
two operators above the configured number held); the held events are shown as such and
are neither run, nor expired, nor pruned; other lanes go on."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text

import tests.sink_playbooks  # noqa: F401  (registers the test playbooks)
from inbox.cli import main
from inbox.domain.errors import BadRequest, Forbidden
from inbox.domain.lanes import LaneNotBlocked
from inbox.infra.config import Settings
from inbox.services import operations, sweep
from inbox.services.drain import drain_once
from inbox.services.operations import Actor
from inbox.services.runtime import Bells, Runtime
from inbox.store.reads import lanes as lreads
from inbox.store.schema import partitions
from inbox.store.write import queue
from inbox.store.write.retention import prune_once
from tests.helpers import body_of, hmac_headers, sink_rows
from tests.integration.test_api import make_token
from tests.integration.test_metrics import scrape, value
from tests.integration.ui_support import grab, new_token, post, sign_in
from tests.lane_effects import judge

pytestmark = pytest.mark.usefixtures("sink_table")


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, batch_size=100, lease_seconds=30, retry_base_seconds=0.01)


def send(client, src, lane: str, n: int, **payload) -> str:
    body = body_of({"type": "lane", "account": lane, "n": n, **payload})
    resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, f"{lane}-{n}"))
    assert resp.status_code == 202, resp.data
    return str(resp.json["id"])


def drain(engine: Engine, wsettings: Settings) -> int:
    """Drain until a claim finds nothing due; how many were claimed."""
    total = 0
    while True:
        got = drain_once(Runtime(wsettings, engine)).claimed
        if not got:
            return total
        total += got


def states(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT public_id, state FROM events")).all())


@pytest.fixture
def lanes(client, make_source, engine):
    """Lane a: five events, the second a poison; lane b: three healthy ones."""
    src = make_source(
        playbook="lane", business_key_paths=["account"], serialize_by_business_key=True
    )
    a = [send(client, src, "a", n, ms=5, poison=(n == 1)) for n in range(5)]
    b = [send(client, src, "b", n, ms=5) for n in range(3)]
    position = {p: ("a", n) for n, p in enumerate(a)} | {p: ("b", n) for n, p in enumerate(b)}
    return src, a, b, position


def test_a_quarantined_event_holds_its_lane_and_only_its_lane(lanes, engine, wsettings):
    src, a, b, position = lanes
    drain(engine, wsettings)
    s = states(engine)
    assert [s[p] for p in a] == ["completed", "quarantined", "received", "received", "received"]
    assert all(s[p] == "completed" for p in b)  # the other lane was not held
    with engine.connect() as conn:
        [blocked] = lreads.blocked(conn, None)
        assert (blocked.event, blocked.held, blocked.source) == (a[1], 3, src.name)
        assert blocked.error_class == "PermanentError"
        held = lreads.lane_state(conn, int(_id(conn, a[3])))
        assert held is not None and held.held_behind == a[1]
        assert held.public()["reason"].startswith(f"held behind {a[1]}")
        blocker = lreads.lane_state(conn, int(_id(conn, a[1])))
        assert blocker is not None and blocker.blocking == 3
        assert lreads.lane_state(conn, int(_id(conn, b[0]))) is None
        assert lreads.blocked(conn, src.tenant_id + 1000) == []  # another tenant's scope
    # The sweep (requeue, release, floor) frees nothing: the lane waits for an operator.
    sweep.run_once(Runtime(wsettings, engine), 60, 0.25)
    assert drain(engine, wsettings) == 0
    v = judge(sink_rows(engine), position)
    assert v.overlaps == 0 and v.out_of_order == 0
    assert v.starts["a"] == [0, 1] and v.ends["a"] == [0]


def test_a_replay_runs_the_blocker_first_then_the_rest(lanes, engine, wsettings, settings):
    _, a, _, position = lanes
    drain(engine, wsettings)
    rung: list[int] = []
    rt = Runtime(settings, engine, Bells(doorbell=lambda: rung.append(1)))
    operations.replay_event(rt, Actor("alice"), a[1])
    assert rung == [1]
    with engine.connect() as conn:
        assert lreads.blocked(conn, None) == []  # the block went with the replay
    drain(engine, wsettings)
    assert all(states(engine)[p] == "completed" for p in a)
    rows = [r for r in sink_rows(engine) if position.get(r.event, ("",))[0] == "a"]
    v = judge(rows, position)
    assert v.overlaps == 0 and v.out_of_order == 0
    # The blocker's replay ran before anything behind it, then the rest in order.
    assert [position[r.event][1] for r in rows if r.step == "end"] == [0, 1, 2, 3, 4]


def test_a_skip_moves_the_lane_on_and_is_audited(lanes, engine, wsettings, settings):
    _, a, _, position = lanes
    drain(engine, wsettings)
    rung: list[int] = []
    rt = Runtime(settings, engine, Bells(doorbell=lambda: rung.append(1)))
    alice = Actor("alice")
    with pytest.raises(BadRequest):
        operations.skip_lane(rt, alice, a[1], "  ")
    with pytest.raises(LaneNotBlocked):
        operations.skip_lane(rt, alice, a[0], "not a blocker")
    assert drain(engine, wsettings) == 0 and rung == []
    done = operations.skip_lane(rt, alice, a[1], "the refund was made by hand")
    assert (done.status, done.held) == ("skipped", 3) and rung == [1]
    with pytest.raises(LaneNotBlocked):
        operations.skip_lane(rt, alice, a[1], "twice")
    drain(engine, wsettings)
    s = states(engine)
    assert s[a[1]] == "quarantined"  # skipped, not run: still a dead letter
    assert all(s[p] == "completed" for p in a[2:])
    v = judge(sink_rows(engine), position)
    assert v.overlaps == 0 and v.out_of_order == 0 and v.ends["a"] == [0, 2, 3, 4]
    with engine.connect() as conn:
        audit = conn.execute(
            text("SELECT actor, action, detail FROM audit_log WHERE action LIKE 'lane_%'")
        ).all()
        skipped = conn.execute(text("SELECT skipped_by, skip_reason FROM lane_blocks")).one()
    assert [(r.actor, r.action) for r in audit] == [("alice", "lane_skipped")]
    assert audit[0].detail["reason"] == "the refund was made by hand"
    assert audit[0].detail["held"] == 3
    assert tuple(skipped) == ("alice", "the refund was made by hand")


def test_a_skip_above_the_limit_takes_two_operators(lanes, engine, wsettings, settings):
    _, a, _, _ = lanes
    drain(engine, wsettings)
    rt = Runtime(dataclasses.replace(settings, lane_skip_approval_above=2), engine)
    asked = operations.skip_lane(rt, Actor("alice"), a[1], "known bad payload")
    assert (asked.status, asked.requested_by) == ("skip requested", "alice")
    assert drain(engine, wsettings) == 0  # still blocked while the second operator is awaited
    with engine.connect() as conn:
        [blocked] = lreads.blocked(conn, None)
    assert blocked.public()["state"] == "skip requested"
    assert blocked.skip_requested_by == "alice"
    with pytest.raises(Forbidden):
        operations.skip_lane(rt, Actor("alice"), a[1], None)
    done = operations.skip_lane(rt, Actor("bob"), a[1], None)  # the request's reason stands
    assert (done.status, done.requested_by, done.reason) == (
        "skipped",
        "alice",
        "known bad payload",
    )
    assert drain(engine, wsettings) == 3
    with engine.connect() as conn:
        actions = conn.execute(
            text("SELECT actor, action FROM audit_log WHERE action LIKE 'lane_%' ORDER BY id")
        ).all()
    assert [tuple(r) for r in actions] == [
        ("alice", "lane_skip_requested"),
        ("bob", "lane_skipped"),
    ]


def test_a_quarantine_by_the_sweeper_blocks_the_lane_too(client, make_source, engine, wsettings):
    src = make_source(
        playbook="lane",
        business_key_paths=["account"],
        serialize_by_business_key=True,
        max_attempts=1,
    )
    first, second = send(client, src, "a", 0), send(client, src, "a", 1)
    with engine.begin() as conn:
        [c] = queue.claim(conn, "w", 10, 30)
        conn.execute(
            text("UPDATE events SET lease_expires_at = now() - interval '1 s' WHERE id = :id"),
            {"id": c.id},
        )
    with engine.begin() as conn:
        assert queue.sweep_expired(conn) == (0, 1)
    assert drain(engine, wsettings) == 0
    assert states(engine) == {first: "quarantined", second: "received"}
    with engine.connect() as conn:
        assert [b.event for b in lreads.blocked(conn, None)] == [first]


def test_nothing_behind_a_blocked_lane_is_pruned(lanes, engine, wsettings, settings):
    _, a, _, _ = lanes
    drain(engine, wsettings)
    later = datetime.now(UTC) + timedelta(days=400)
    prune_once(engine, settings, now=later)
    with engine.connect() as conn:
        kept = dict(conn.execute(text("SELECT public_id, body IS NOT NULL FROM events")).all())
        keys = conn.execute(text("SELECT count(*) FROM event_keys")).scalar_one()
        day = partitions.contents(conn, datetime.now(UTC).date())
    assert all(kept[p] for p in a[1:]), kept  # the blocker and the held: bodies kept
    assert not kept[a[0]]  # a finished event of the lane is pruned as usual
    assert keys >= 4  # the blocker's key and the held events' keys stay
    assert day.unfinished_events >= 4
    rt = Runtime(settings, engine)
    operations.skip_lane(rt, Actor("alice"), a[1], "gone")
    prune_once(engine, settings, now=later)
    with engine.connect() as conn:
        body = conn.execute(
            text("SELECT body IS NOT NULL FROM events WHERE public_id = :p"), {"p": a[1]}
        ).scalar_one()
    assert not body  # once skipped, the blocker is an ordinary dead letter again


def _id(conn, public_id: str) -> int:
    return int(
        conn.execute(
            text("SELECT id FROM events WHERE public_id = :p"), {"p": public_id}
        ).scalar_one()
    )


def test_the_api_cli_and_metrics_show_the_held_events_and_skip_through_one_use_case(
    lanes, engine, wsettings, client
):
    src, a, _, _ = lanes
    drain(engine, wsettings)
    operator = make_token(engine, "ops", "operator")
    viewer = make_token(engine, "eyes", "viewer")
    listed = client.get("/api/v1/lanes/blocked", headers=viewer).json["data"]
    assert [(x["event"], x["held"], x["state"]) for x in listed] == [(a[1], 3, "blocked")]
    shown = client.get(f"/api/v1/events/{a[3]}", headers=viewer).json
    assert (shown["state"], shown["lane"]["held_behind"]) == ("received", a[1])
    assert "quarantined" in shown["lane"]["reason"]
    assert client.get(f"/api/v1/events/{a[1]}", headers=viewer).json["lane"] == {"blocking": 3}
    samples = scrape(client)
    labels = {"tenant": src.tenant, "source": src.name}
    assert value(samples, "inbox_lanes_blocked", **labels) == 1
    assert value(samples, "inbox_lane_held_events", **labels) == 3
    out = CliRunner().invoke(main, ["lanes", "blocked", "--json"], catch_exceptions=False)
    assert out.exit_code == 0 and json.loads(out.output)[0]["held"] == 3
    # A viewer may not skip; no reason is a 400; nothing moved meanwhile.
    skip = f"/api/v1/events/{a[1]}/skip"
    assert client.post(skip, json={"reason": "x"}, headers=viewer).status_code == 403
    bad = client.post(skip, json={}, headers=operator)
    assert bad.status_code == 400 and "reason" in bad.json["error"]["message"]
    assert client.post(skip, json={"why": "x"}, headers=operator).status_code == 400
    assert drain(engine, wsettings) == 0
    done = client.post(skip, json={"reason": "sent by hand"}, headers=operator)
    assert done.status_code == 200 and done.json["status"] == "skipped"
    again = client.post(skip, json={"reason": "again"}, headers=operator)
    assert again.status_code == 409 and again.json["error"]["code"] == "lane_not_blocked"
    assert drain(engine, wsettings) == 3
    assert value(scrape(client), "inbox_lanes_blocked", **labels) is None
    out = CliRunner().invoke(main, ["lanes", "blocked", "--json"], catch_exceptions=False)
    assert json.loads(out.output) == []


def test_the_cli_skips_with_two_operators(lanes, engine, wsettings, monkeypatch):
    _, a, _, _ = lanes
    drain(engine, wsettings)
    monkeypatch.setenv("INBOX_LANE_SKIP_APPROVAL_ABOVE", "1")
    run = CliRunner().invoke
    out = run(main, ["lanes", "skip", a[1], "--actor", "alice"], catch_exceptions=False)
    assert out.exit_code != 0 and "reason" in out.output  # a reason is required
    out = run(main, ["lanes", "skip", a[1], "--reason", "bad", "--actor", "alice"])
    assert out.exit_code == 0 and "another operator confirms" in out.output, out.output
    assert drain(engine, wsettings) == 0
    out = run(main, ["lanes", "skip", a[1], "--actor", "alice"])
    assert out.exit_code != 0 and "different operator" in out.output
    out = run(main, ["lanes", "skip", a[1], "--actor", "bob", "--json"])
    assert out.exit_code == 0 and json.loads(out.output)["status"] == "skipped"
    assert drain(engine, wsettings) == 3


def test_the_console_shows_the_held_events_and_skips_with_a_reason(
    lanes, engine, wsettings, client
):
    _, a, _, _ = lanes
    drain(engine, wsettings)
    sign_in(client, new_token(engine, "ops", "operator"))
    page = client.get("/ui/dead-letters").get_data(as_text=True)
    assert 'id="blocked-lanes"' in page and a[1] in page
    assert grab(r'data-field="held">(\d+)<', page) == "3"
    held = client.get(f"/ui/events/{a[3]}").get_data(as_text=True)
    assert 'id="held-behind"' in held and a[1] in held
    blocker = client.get(f"/ui/events/{a[1]}").get_data(as_text=True)
    assert 'id="skip-form"' in blocker and "3 events wait behind it" in blocker
    form = f"/ui/events/{a[1]}"
    resp = post(client, f"/ui/events/{a[1]}/skip", form, reason="")
    assert resp.status_code == 400  # a reason is required; nothing moved
    assert drain(engine, wsettings) == 0
    resp = post(client, f"/ui/events/{a[1]}/skip", form, reason="fixed by hand")
    assert resp.status_code == 302
    assert drain(engine, wsettings) == 3
    page = client.get("/ui/dead-letters").get_data(as_text=True)
    assert 'id="no-lanes"' in page
    with engine.connect() as conn:
        actor = conn.execute(
            text("SELECT actor FROM audit_log WHERE action = 'lane_skipped'")
        ).scalar_one()
    assert actor.startswith("ops")
