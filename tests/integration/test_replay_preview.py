"""A replay's preview: per event, the steps skipped, run or stopped by a guard and the
callbacks sent; nothing is written but its audit row, and the real replay then does what
it said (tests/sink_playbooks.py's ``preview-case``)."""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from inbox.infra.config import Settings
from inbox.services.bulk import run_bulk_once
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from tests.helpers import body_of, hmac_headers, wait_for
from tests.integration.test_api import make_token
from tests.integration.test_bulk_replay import job_id
from tests.integration.test_callbacks import endpoint
from tests.integration.test_ui import CSRF, grab, new_token, sign_in
from web import create_app

T1, T2 = "2026-11-30T09:00:00Z", "2026-11-30T17:30:00Z"


@dataclass(frozen=True)
class Scene:
    tenant: str
    endpoint: str
    a: str  # c-1: open, lock committed; close failed
    b: str  # c-2: like a, then c (newer) completed: close is stale
    c: str  # c-2, completed: not replayable
    d: str  # c-3: open failed; e owns the lock since: lock is a duplicate fact


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    return Settings(database_url=settings.database_url, batch_size=1, retry_base_seconds=0.1)


def drain_all(engine, wsettings) -> None:
    def drained() -> bool:
        with engine.connect() as conn:
            left = conn.execute(
                text("SELECT count(*) FROM events WHERE state IN ('received', 'processing')")
            ).scalar_one()
        if not left:
            return True
        drain_once(Runtime(wsettings, engine))
        return False

    wait_for(drained, 60)


@pytest.fixture
def scene(client, engine, wsettings, make_source, sink_table) -> Scene:
    tenant = f"tp{secrets.token_hex(3)}"
    src = make_source(
        tenant=tenant, playbook="preview-case", business_key_paths=["case"], occurred_at_path="at"
    )
    ep = endpoint(engine, tenant, "https://hooks.example.com/cases")

    def send(key: str, **payload: Any) -> str:
        body = body_of(payload)
        resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key))
        assert resp.status_code == 202, resp.json
        drain_all(engine, wsettings)
        return str(resp.json["id"])

    a = send("a", case="c-1", at=T1, fail_close=True)
    b = send("b", case="c-2", at=T1, fail_close=True)
    c = send("c", case="c-2", at=T2)
    send("e", case="c-3", at=T1)
    d = send("d", case="c-3", at=T2, fail_open=True)
    return Scene(tenant, ep.public_id, a, b, c, d)


def expected(s: Scene) -> dict[str, Any]:
    """What replaying a, b, c and d does, step by step."""
    return {
        s.a: ("completed", [("open", "skip"), ("lock", "skip"), ("close", "run")]),
        s.b: ("stale", [("open", "skip"), ("lock", "skip"), ("close", "stale")]),
        s.d: ("duplicate_fact", [("open", "run"), ("lock", "duplicate_fact"), ("close", "run")]),
    }


def callbacks_of(s: Scene) -> set[tuple[str, str, str, int]]:
    return {
        (s.a, "case.closed", s.endpoint, 1),
        (s.d, "case.opened", s.endpoint, 1),
        (s.d, "case.closed", s.endpoint, 1),
    }


def check_plan(plan: dict[str, Any], s: Scene) -> None:
    by_id = {e["event"]: e for e in plan["events"]}
    for public_id, (outcome, steps) in expected(s).items():
        ev = by_id[public_id]
        assert ev["replayable"] and ev["outcome"] == outcome, ev
        assert [(st["name"], st["action"]) for st in ev["steps"]] == steps
    got = {
        (e["event"], cb["event_type"], cb["endpoint"], cb["replay"])
        for e in plan["events"]
        for cb in e["callbacks"]
    }
    assert got == callbacks_of(s)
    totals = plan["totals"]
    steps = (totals["skip"], totals["run"], totals["stale"], totals["duplicate_fact"])
    assert steps == (4, 3, 1, 1)
    assert totals["callbacks"] == 3 and totals["unknown_callbacks"] == 0


def snapshot(engine) -> dict[str, Any]:
    """Everything a replay could change, and the audit log apart."""
    with engine.connect() as conn:

        def rows(sql: str) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in conn.execute(text(sql))]

        return {
            "sink": rows("SELECT step_key FROM test_sink ORDER BY id"),
            "steps": rows("SELECT event_id, name, result::text FROM steps ORDER BY 1, 2"),
            "deliveries": rows("SELECT public_id, state, replay FROM deliveries ORDER BY id"),
            "effects": rows("SELECT name, event_id FROM effects ORDER BY 1, 2"),
            "events": rows(
                "SELECT public_id, state, replay, attempts, outcome, available_at, occurred_at,"
                " newer_event_id FROM events ORDER BY id"
            ),
            "jobs": rows("SELECT id, status FROM bulk_replays ORDER BY id"),
            "audit": rows("SELECT id, action FROM audit_log ORDER BY id"),
        }


def only_a_preview_was_audited(before: dict[str, Any], after: dict[str, Any]) -> None:
    for part in before:
        if part != "audit":
            assert after[part] == before[part], part
    added = after["audit"][len(before["audit"]) :]
    assert after["audit"][: len(before["audit"])] == before["audit"]
    assert [action for _, action in added] == ["replay_preview"]


def replayed(engine, before: dict[str, Any]) -> tuple[set[tuple[str, str]], set[Any]]:
    """What a replay did since ``before``: the steps that ran (their effects at the sink) and
    the callbacks it wrote."""
    with engine.connect() as conn:
        ran = {
            tuple(r.step_key.rsplit(".", 1))
            for r in conn.execute(text("SELECT step_key FROM test_sink"))
            if (r.step_key,) not in before["sink"]
        }
        sent = {
            (r.event, r.event_type, r.endpoint, r.replay)
            for r in conn.execute(
                text(
                    "SELECT e.public_id AS event, d.event_type, p.public_id AS endpoint, d.replay"
                    " FROM deliveries d JOIN events e ON e.id = d.event_id"
                    " JOIN endpoints p ON p.id = d.endpoint_id WHERE d.replay > 0"
                )
            )
        }
    return ran, sent


def planned_runs(s: Scene) -> set[tuple[str, str]]:
    return {
        (public_id, step)
        for public_id, (_, steps) in expected(s).items()
        for step, action in steps
        if action == "run"
    }


def test_the_api_previews_a_bulk_replay_and_the_replay_then_does_just_that(
    client, engine, wsettings, scene
):
    op = make_token(engine, "alice", "operator")
    body = {"kind": "events", "filter": {"tenant": scene.tenant}, "dry_run": True}
    before = snapshot(engine)
    resp = client.post("/api/v1/replays", headers=op, json=body)
    assert resp.status_code == 200, resp.json
    plan = resp.json
    assert plan["dry_run"] is True and plan["matched"] == 3  # a, b, d are quarantined
    check_plan(plan, scene)
    only_a_preview_was_audited(before, snapshot(engine))

    # The real replay: a bulk job, its runner, then the workers.
    del body["dry_run"]
    started = client.post("/api/v1/replays", headers=op, json=body)
    assert started.status_code == 202, started.json
    before = snapshot(engine)
    assert run_bulk_once(Runtime(Settings(), engine), job_id(engine, started.json["id"])).moved == 3
    drain_all(engine, wsettings)
    ran, sent = replayed(engine, before)
    assert ran == planned_runs(scene)
    assert sent == callbacks_of(scene)
    with engine.connect() as conn:
        outcomes = dict(
            conn.execute(
                text("SELECT public_id, outcome FROM events WHERE public_id = ANY(:ids)"),
                {"ids": [scene.a, scene.b, scene.d]},
            ).fetchall()
        )
    assert outcomes == {k: v[0] for k, v in expected(scene).items()}


def test_a_dry_run_is_refused_for_a_bad_flag_and_for_deliveries(client, engine, scene):
    op = make_token(engine, "alice", "operator")
    before = snapshot(engine)
    for body in (
        {"kind": "events", "filter": {"tenant": scene.tenant}, "dry_run": "yes"},
        {"kind": "deliveries", "filter": {"tenant": scene.tenant}, "dry_run": True},
    ):
        resp = client.post("/api/v1/replays", headers=op, json=body)
        assert resp.status_code == 400 and resp.json["error"], resp.json
    assert snapshot(engine) == before


def test_the_cli_dry_run_shows_the_plan_and_changes_nothing(engine, scene):
    before = snapshot(engine)
    ids = [scene.a, scene.b, scene.c, scene.d]
    args = ["replay", *ids, "--dry-run", "--json", "--actor", "carol"]
    out = CliRunner().invoke(main, args, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    plan = json.loads(out.output)
    check_plan(plan, scene)
    refused = next(e for e in plan["events"] if e["event"] == scene.c)
    assert not refused["replayable"] and "completed" in refused["problem"]
    after = snapshot(engine)
    only_a_preview_was_audited(before, after)
    with engine.connect() as conn:
        actor, detail = conn.execute(
            text("SELECT actor, detail FROM audit_log ORDER BY id DESC LIMIT 1")
        ).one()
    assert actor == "carol" and detail["ids"] == ids and detail["totals"]["run"] == 3

    text_out = CliRunner().invoke(main, ["replay", *ids, "--dry-run"], catch_exceptions=False)
    assert text_out.exit_code == 0, text_out.output
    assert f"{scene.b}  playbook preview-case  outcome stale" in text_out.output
    assert "stale           close: newer event" in text_out.output
    assert f"callback        case.opened to {scene.endpoint} (webhook-replay 1)" in text_out.output
    assert "would replay 3 of 4 event(s)" in text_out.output


def test_the_console_confirmation_and_approval_pages_show_the_plan(engine, settings, scene):
    low = Settings(database_url=settings.database_url, bulk_approval_min=2)
    app = create_app(low, engine=engine, doorbell=lambda: None, route_cache_seconds=0)
    alice, bob = app.test_client(), app.test_client()
    sign_in(alice, new_token(engine, "alice", "operator"))
    sign_in(bob, new_token(engine, "bob", "operator"))

    before = snapshot(engine)
    confirm = alice.get(f"/ui/replays/new?tenant={scene.tenant}").get_data(as_text=True)
    only_a_preview_was_audited(before, snapshot(engine))
    for public_id, (_, steps) in expected(scene).items():
        row = grab(rf'(?s)(<tr data-event="{public_id}">.*?</tr>)', confirm)
        for step, action in steps:
            assert f'data-step="{step}" data-action="{action}"' in row
    totals = grab(r'(<p id="preview-totals"[^>]*>)', confirm)
    assert 'data-run="3"' in totals and 'data-stale="1"' in totals
    assert 'data-duplicate="1"' in totals and 'data-callbacks="3"' in totals

    form = {"csrf": grab(CSRF, confirm), "tenant": scene.tenant, "rate": "1000"}
    key = grab(r'name="key" value="([^"]+)"', confirm)
    job = alice.post("/ui/replays", data={**form, "key": key}).headers["Location"].rsplit("/")[-1]
    before = snapshot(engine)
    page = bob.get(f"/ui/replays/{job}").get_data(as_text=True)
    assert 'id="awaiting-approval"' in page and 'id="approve"' in page
    assert 'id="replay-preview"' in page
    assert 'data-step="lock" data-action="duplicate_fact"' in page
    only_a_preview_was_audited(before, snapshot(engine))
    with engine.connect() as conn:
        actor, kind, detail = conn.execute(
            text("SELECT actor, subject_kind, detail FROM audit_log ORDER BY id DESC LIMIT 1")
        ).one()
    assert (actor, kind, detail["bulk_replay"]) == ("bob", "bulk_replay", job)


def test_events_show_lists_steps_in_the_order_they_ran(engine, scene):
    """open, lock, close as the playbook runs them, not by name (close, lock, open), and
    each before the event's completion wherever steps and events are sorted by time."""
    out = CliRunner().invoke(main, ["events", "show", scene.c, "--json"], catch_exceptions=False)
    shown = json.loads(out.output)
    assert [s["name"] for s in shown["steps"]] == ["open", "lock", "close"]
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT s.name, s.completed_at <= e.finished_at AS before FROM steps s"
                " JOIN events e ON e.id = s.event_id WHERE e.public_id = :p"
                " ORDER BY s.completed_at"
            ),
            {"p": scene.c},
        ).all()
    assert [r.name for r in rows] == ["open", "lock", "close"] and all(r.before for r in rows)
    text_out = CliRunner().invoke(main, ["events", "show", scene.c], catch_exceptions=False)
    steps = text_out.output.split("\nsteps:")[1]
    assert steps.index("open") < steps.index("lock") < steps.index("close")
    assert re.search(r"^state\s+completed \(duplicate_fact\)$", text_out.output, re.M)


def test_events_show_says_completed_once_when_the_outcome_is_plain(engine, scene):
    with engine.connect() as conn:
        plain = conn.execute(
            text("SELECT public_id FROM events WHERE outcome = 'completed' LIMIT 1")
        ).scalar_one()
    out = CliRunner().invoke(main, ["events", "show", plain], catch_exceptions=False).output
    assert re.search(r"^state\s+completed$", out, re.M), out  # not "completed (completed)"
