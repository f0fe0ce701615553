"""The self-audit: each invariant broken on purpose (rows corrupted in a real database) is
reported with the rows involved; a healthy run reports nothing; the incremental pass reads
from its watermark; the CLI's exit status and JSON; repairs need a second operator."""

from __future__ import annotations

import datetime as dt
import json
import logging

import pytest
from click.testing import CliRunner
from sqlalchemy import text

import tests.sink_playbooks  # noqa: F401  (registers the test playbooks)
from inbox.cli import main
from inbox.domain import callbacks, ledger
from inbox.domain.errors import Forbidden
from inbox.domain.invariants import OWED_DELIVERY_STATES, Invariant
from inbox.infra import metrics
from inbox.infra.config import Settings
from inbox.services import audit
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.reads import invariants as checks
from inbox.store.write import endpoints as estore
from inbox.store.write import holds as hstore
from tests.helpers import body_of, hmac_headers

I = Invariant  # noqa: E741


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    return Settings(database_url=settings.database_url)


@pytest.fixture
def forward(make_source):
    return make_source(playbook="forward", event_type_path="type")


def endpoint(engine, tenant: str, url: str = "http://127.0.0.1:9/hook", **opts):
    with engine.begin() as conn:
        return estore.create_endpoint(conn, tenant, url, callbacks.new_secret(), **opts)


def send(client, src, key: str, payload=None) -> None:
    body = body_of(payload or {"type": "order.paid", "n": key})
    r = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key))
    assert r.status_code == 202


def decided(client, engine, wsettings, src, *keys: str) -> None:
    for key in keys:
        send(client, src, key)
    drain_once(Runtime(wsettings, engine))


def found(engine, wsettings, *invariants: Invariant) -> dict[str, list]:
    report = audit.run(Runtime(wsettings, engine), list(invariants) or None, full=True)
    return {c.invariant.value: c.found for c in report.checked}


def corrupt(engine, sql: str, **params) -> None:
    """Change rows as no code path would: the state guards' triggers are off for it."""
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(text(sql), params)


def one(rows, **match):
    hits = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    assert len(hits) == 1, rows
    return hits[0]


def test_a_healthy_run_with_callbacks_reports_nothing(client, engine, wsettings, forward):
    endpoint(engine, forward.tenant)
    endpoint(engine, forward.tenant, event_types=["order.paid"])
    endpoint(engine, forward.tenant, event_types=["other.type"])  # not subscribed
    decided(client, engine, wsettings, forward, "a", "b", "c")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM callback_intents")).scalar() == 6
        assert conn.execute(text("SELECT count(*) FROM deliveries")).scalar() == 6
    assert all(not f for f in found(engine, wsettings).values())


def test_a_missing_delivery_is_reported_with_its_intent(client, engine, wsettings, forward):
    a = endpoint(engine, forward.tenant)
    b = endpoint(engine, forward.tenant)
    decided(client, engine, wsettings, forward, "k1")
    with engine.connect() as conn:
        gone = conn.execute(
            text("SELECT public_id FROM deliveries WHERE endpoint_id = :e"), {"e": b.id}
        ).scalar_one()
    corrupt(engine, "DELETE FROM deliveries WHERE public_id = :p", p=gone)
    [v] = found(engine, wsettings, I.DELIVERY_PER_ENDPOINT)["delivery_per_endpoint"]
    assert v.subject == f"intent:{gone}"
    intent = one(v.rows, table="callback_intents")
    assert intent["endpoint_id"] == b.id and intent["problem"] == "no delivery for this endpoint"
    assert not [r for r in v.rows if r.get("table") == "deliveries"]
    assert a.id != b.id


def test_a_doubled_delivery_is_reported_with_both_rows(client, engine, wsettings, forward):
    endpoint(engine, forward.tenant)
    decided(client, engine, wsettings, forward, "k1")
    corrupt(
        engine,
        "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type, body)"
        " SELECT public_id, tenant_id, endpoint_id, event_id, event_type, body FROM deliveries",
    )
    [v] = found(engine, wsettings, I.DELIVERY_PER_ENDPOINT)["delivery_per_endpoint"]
    assert one(v.rows, table="callback_intents")["problem"] == "2 deliveries for one intent"
    assert len([r for r in v.rows if r.get("table") == "deliveries"]) == 2


def test_a_disabled_endpoint_is_owed_its_delivery(client, engine, wsettings, forward):
    """An endpoint's state decides when a callback is attempted, never whether it exists:
    the disabled endpoint gets its delivery held, and were it dropped, the audit reports
    exactly that delivery missing, naming the endpoint and its intent."""
    endpoint(engine, forward.tenant)
    off = endpoint(engine, forward.tenant)
    with engine.begin() as conn:
        conn.execute(text("UPDATE endpoints SET enabled = false WHERE id = :e"), {"e": off.id})
    decided(client, engine, wsettings, forward, "k1")
    with engine.connect() as conn:
        states = (
            conn.execute(text("SELECT state FROM deliveries WHERE endpoint_id = :e"), {"e": off.id})
            .scalars()
            .all()
        )
    assert states == ["held"]
    assert found(engine, wsettings, I.DELIVERY_PER_ENDPOINT)["delivery_per_endpoint"] == []
    # Dropped, as deliveries were before they were held: the audit names what is missing.
    corrupt(engine, "DELETE FROM deliveries WHERE endpoint_id = :e", e=off.id)
    [v] = found(engine, wsettings, I.DELIVERY_PER_ENDPOINT)["delivery_per_endpoint"]
    intent = one(v.rows, table="callback_intents")
    assert intent["endpoint_id"] == off.id and intent["endpoint_enabled"] is False
    assert intent["problem"] == "no delivery for this endpoint"


def test_a_deleted_endpoint_is_owed_nothing_and_the_audit_agrees(
    client, engine, wsettings, forward
):
    """After a delete, a step's callbacks make neither an intent nor a delivery for the
    deleted endpoint, and the self-audit finds nothing missing; the other gets its own."""
    from inbox.services.endpoint_delete import delete_endpoint

    kept = endpoint(engine, forward.tenant)
    gone = endpoint(engine, forward.tenant)
    delete_endpoint(Runtime(wsettings, engine), "ops", None, gone.public_id)
    decided(client, engine, wsettings, forward, "k1")
    with engine.connect() as conn:
        made = conn.execute(
            text(
                "SELECT (SELECT count(*) FROM callback_intents WHERE endpoint_id = :e),"
                " (SELECT count(*) FROM deliveries WHERE endpoint_id = :e),"
                " (SELECT count(*) FROM deliveries WHERE endpoint_id = :k)"
            ),
            {"e": gone.id, "k": kept.id},
        ).one()
    assert tuple(made) == (0, 0, 1)
    assert found(engine, wsettings, I.DELIVERY_PER_ENDPOINT)["delivery_per_endpoint"] == []


def test_held_is_a_state_that_owes_a_delivery():
    assert {"held", "pending", "sending", "delivered", "failed"} <= set(OWED_DELIVERY_STATES)


def test_a_webhook_id_sent_with_two_bodies(client, engine, wsettings, forward):
    endpoint(engine, forward.tenant)
    decided(client, engine, wsettings, forward, "k1")
    corrupt(engine, "UPDATE deliveries SET attempts = 1")
    corrupt(
        engine,
        "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type, body,"
        " attempts) SELECT public_id, tenant_id, endpoint_id, event_id, event_type,"
        " body || '\\x20'::bytea, 1 FROM deliveries",
    )
    [v] = found(engine, wsettings, I.WEBHOOK_ID_ONE_BODY)["webhook_id_one_body"]
    shas = {r["body_sha256"] for r in v.rows}
    assert len(v.rows) == 2 and len(shas) == 2
    assert {r["public_id"] for r in v.rows} == {v.subject.removeprefix("webhook:")}


def test_event_columns_that_disagree_with_its_state(client, engine, wsettings, forward):
    decided(client, engine, wsettings, forward, "k1", "k2")
    with engine.connect() as conn:
        first, second = conn.execute(text("SELECT public_id FROM events ORDER BY id")).scalars()
    corrupt(engine, "UPDATE events SET lease_owner = 'ghost' WHERE public_id = :p", p=first)
    corrupt(
        engine,
        "UPDATE events SET state = 'processing', finished_at = NULL, trace_id = 'abc123'"
        " WHERE public_id = :p",
        p=second,
    )
    got = {v.subject: v for v in found(engine, wsettings, I.EVENT_STATE)["event_state"]}
    assert set(got) == {f"event:{first}", f"event:{second}"}
    assert got[f"event:{first}"].rows[0]["problem"] == "a lease on an event that is not processing"
    assert got[f"event:{second}"].rows[0]["problem"] == "processing without a lease"
    assert got[f"event:{second}"].trace_id == "abc123"


def _expired_lease(engine, public_id: str) -> None:
    corrupt(
        engine,
        "UPDATE events SET state = 'processing', finished_at = NULL, lease_owner = 'dead',"
        " lease_expires_at = now() - interval '1 hour', attempts = 1 WHERE public_id = :p",
        p=public_id,
    )


def test_an_expired_lease_left_unreclaimed(client, engine, wsettings, forward):
    decided(client, engine, wsettings, forward, "k1")
    with engine.connect() as conn:
        pid = conn.execute(text("SELECT public_id FROM events")).scalar_one()
    _expired_lease(engine, pid)
    [v] = found(engine, wsettings, I.LEASE_RECLAIMED)["lease_reclaimed"]
    assert v.subject == f"event:{pid}" and v.rows[0]["lease_owner"] == "dead"
    assert "not reclaimed" in v.rows[0]["problem"]


def test_a_fresh_or_recently_expired_lease_is_no_violation(client, engine, wsettings, forward):
    decided(client, engine, wsettings, forward, "k1")
    corrupt(
        engine,
        "UPDATE events SET state = 'processing', finished_at = NULL, lease_owner = 'w',"
        " lease_expires_at = now() - interval '5 seconds'",
    )
    assert found(engine, wsettings, I.LEASE_RECLAIMED)["lease_reclaimed"] == []


def test_completed_after_a_quarantine_without_a_replay(client, engine, wsettings, forward):
    decided(client, engine, wsettings, forward, "k1")
    corrupt(
        engine,
        "INSERT INTO event_attempts (event_id, attempt, error_class, outcome)"
        " SELECT id, 1, 'Boom', 'quarantined' FROM events",
    )
    [v] = found(engine, wsettings, I.STEP_ONCE)["step_once"]
    assert v.rows[0]["problem"] == "1 quarantines for 0 replays, now completed"
    assert one(v.rows, table="event_attempts")["outcome"] == "quarantined"


def test_an_effect_run_by_a_second_event_of_its_business_key(
    client, engine, wsettings, make_source, sink_table
):
    src = make_source(playbook="deny", business_key_paths=["account"])
    for key in ("a", "b"):
        body = body_of({"type": "x", "account": "acct-1", "n": key})
        client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key))
    drain_once(Runtime(wsettings, engine))
    assert found(engine, wsettings, I.STEP_ONCE)["step_once"] == []
    # The second event's skip is rewritten as if it had run the effect itself.
    corrupt(engine, "UPDATE steps SET result = '{\"denied\": true}' WHERE result ? 'skipped'")
    [v] = found(engine, wsettings, I.STEP_ONCE)["step_once"]
    assert v.subject.startswith("effect:deny.deny:")
    assert one(v.rows, table="steps")["name"] == "deny"


def test_a_lane_event_that_ran_before_its_predecessor_finished(
    client, engine, wsettings, make_source
):
    src = make_source(playbook="forward", business_key_paths=["account"],
                      serialize_by_business_key=True)  # fmt: skip
    for key in ("first", "second"):
        body = body_of({"type": "x", "account": "acct-1", "n": key})
        assert (
            client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key)).status_code
            == 202
        )
    for _ in range(3):
        drain_once(Runtime(wsettings, engine))
    assert found(engine, wsettings, I.LANE_ORDER)["lane_order"] == []
    with engine.connect() as conn:
        first, second = conn.execute(text("SELECT public_id FROM events ORDER BY id")).scalars()
    corrupt(
        engine,
        "UPDATE events SET finished_at = finished_at + interval '1 hour' WHERE public_id = :p",
        p=first,
    )
    [v] = found(engine, wsettings, I.LANE_ORDER)["lane_order"]
    assert v.subject == f"lane:{second}"
    assert [r["public_id"] for r in v.rows] == [second, first]
    assert v.rows[0]["ran"].startswith("step ")


def test_a_lane_event_that_ran_behind_a_quarantined_event_not_skipped(
    client, engine, wsettings, make_source
):
    """A quarantined event blocks its lane (truth 15): a later event that ran while it
    stood unskipped is a violation; one that ran after an operator's skip is not."""
    src = make_source(playbook="forward", business_key_paths=["account"],
                      serialize_by_business_key=True)  # fmt: skip
    for key in ("first", "second"):
        body = body_of({"type": "x", "account": "acct-1", "n": key})
        assert (
            client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key)).status_code
            == 202
        )
    for _ in range(3):
        drain_once(Runtime(wsettings, engine))
    with engine.connect() as conn:
        first, second = conn.execute(text("SELECT public_id FROM events ORDER BY id")).scalars()
    # The first event is made a dead letter that finished before the second ran, as an
    # ordering that let successors run ahead of a poison event would leave it.
    corrupt(
        engine,
        "UPDATE events SET state = 'quarantined', outcome = NULL,"
        " finished_at = finished_at - interval '1 hour' WHERE public_id = :p",
        p=first,
    )
    # Quarantined before lanes blocked (no lane_blocks row): it released its lane then.
    assert found(engine, wsettings, I.LANE_ORDER)["lane_order"] == []
    corrupt(
        engine,
        "INSERT INTO lane_blocks (tenant_id, lane, event_id, since)"
        " SELECT tenant_id, ordering_key, id, finished_at FROM events WHERE public_id = :p",
        p=first,
    )
    [v] = found(engine, wsettings, I.LANE_ORDER)["lane_order"]
    assert v.subject == f"lane:{second}"
    assert [r["public_id"] for r in v.rows] == [second, first]
    # An operator skipped it before the second ran: the lane was free.
    corrupt(
        engine,
        "UPDATE lane_blocks SET skipped_by = 'op', skipped_at = since, skip_reason = 'r'"
        " WHERE event_id = (SELECT id FROM events WHERE public_id = :p)",
        p=first,
    )
    assert found(engine, wsettings, I.LANE_ORDER)["lane_order"] == []


def test_a_missing_partition_for_a_day_a_retry_is_due(engine, wsettings):
    with engine.connect() as conn:
        today = conn.execute(text("SELECT CAST(now() AT TIME ZONE 'UTC' AS date)")).scalar_one()
    assert found(engine, wsettings, I.PARTITIONS_AHEAD)["partitions_ahead"] == []
    name = ledger.partition_name("delivery_attempts", today + dt.timedelta(days=1))
    lo, hi = ledger.bounds(today + dt.timedelta(days=1))
    with engine.begin() as conn:
        conn.execute(text(f"ALTER TABLE delivery_attempts DETACH PARTITION {name}"))
    try:
        [v] = found(engine, wsettings, I.PARTITIONS_AHEAD)["partitions_ahead"]
        assert v.subject == f"partition:{name}" and v.rows[0]["problem"] == "missing"
    finally:
        with engine.begin() as conn:
            conn.execute(
                text(
                    f"ALTER TABLE delivery_attempts ATTACH PARTITION {name}"
                    f" FOR VALUES FROM ({lo}) TO ({hi})"
                )
            )
    assert found(engine, wsettings, I.PARTITIONS_AHEAD)["partitions_ahead"] == []


def test_a_held_body_removed(client, engine, wsettings, forward):
    decided(client, engine, wsettings, forward, "k1", "k2")
    with engine.begin() as conn:
        hold = hstore.place(conn, forward.tenant, "legal", "litigation", source=forward.name)
    with engine.connect() as conn:
        first = conn.execute(text("SELECT public_id FROM events ORDER BY id")).scalars().first()
    corrupt(engine, "UPDATE events SET body = NULL WHERE public_id = :p", p=first)
    [v] = found(engine, wsettings, I.HELD_NOT_PRUNED)["held_not_pruned"]
    assert v.subject == f"hold:{hold.public_id}:{first}"
    assert one(v.rows, table="events")["public_id"] == first


def test_an_operator_action_without_its_audit_row(client, engine, wsettings, forward):
    decided(client, engine, wsettings, forward, "k1")
    assert found(engine, wsettings, I.OPERATOR_AUDITED)["operator_audited"] == []
    corrupt(engine, "UPDATE events SET replay = 1")
    [v] = found(engine, wsettings, I.OPERATOR_AUDITED)["operator_audited"]
    assert v.rows[0]["problem"] == "1 replays, 0 audited"


def test_incremental_passes_read_from_the_watermark_and_full_ones_resolve(
    client, engine, wsettings, forward
):
    decided(client, engine, wsettings, forward, "old")
    for _ in range(3):  # the first pass reads everything; each row is read by two passes
        audit.run(Runtime(wsettings, engine), [I.OPERATOR_AUDITED])
    corrupt(engine, "UPDATE events SET replay = 1")  # an old row, below the watermark
    assert audit.run(Runtime(wsettings, engine), [I.OPERATOR_AUDITED]).violations == 0
    decided(client, engine, wsettings, forward, "new")
    corrupt(engine, "UPDATE events SET replay = 2 WHERE replay = 0")  # a new row
    inc = audit.run(Runtime(wsettings, engine), [I.OPERATOR_AUDITED])
    assert inc.violations == 1 and inc.checked[0].since > 0
    full = audit.run(Runtime(wsettings, engine), [I.OPERATOR_AUDITED], full=True)
    assert full.violations == 2
    with engine.connect() as conn:
        assert len(checks.open_violations(conn, "operator_audited")) == 2
    corrupt(engine, "UPDATE events SET replay = 0")
    audit.run(Runtime(wsettings, engine), [I.OPERATOR_AUDITED])  # incremental: resolves nothing
    with engine.connect() as conn:
        assert len(checks.open_violations(conn, "operator_audited")) == 2
    audit.run(Runtime(wsettings, engine), [I.OPERATOR_AUDITED], full=True)
    with engine.connect() as conn:
        assert checks.open_violations(conn, "operator_audited") == []


def test_a_violation_is_counted_once_logged_with_its_trace_and_kept_open(
    client, engine, wsettings, forward, caplog
):
    decided(client, engine, wsettings, forward, "k1")
    corrupt(engine, "UPDATE events SET lease_owner = 'ghost', trace_id = 'feedbeef'")
    before = metrics.INVARIANT_VIOLATIONS.labels("event_state")._value.get()
    with caplog.at_level(logging.ERROR, logger="inbox.services.audit"):
        audit.run(Runtime(wsettings, engine), [I.EVENT_STATE], full=True)
        audit.run(Runtime(wsettings, engine), [I.EVENT_STATE], full=True)  # still open: not again
    assert metrics.INVARIANT_VIOLATIONS.labels("event_state")._value.get() == before + 1
    [rec] = [r for r in caplog.records if r.name == "inbox.services.audit"]
    assert rec.trace_id == "feedbeef" and rec.invariant == "event_state"
    assert rec.rows[0]["problem"] == "a lease on an event that is not processing"
    with engine.connect() as conn:
        counts = {c.invariant: c.count for c in checks.open_counts(conn)}
    assert counts["event_state"] == 1 and counts["lane_order"] == 0


def test_cli_exit_status_json_and_one_invariant(client, engine, wsettings, forward, database_url):
    decided(client, engine, wsettings, forward, "k1")
    env = {"DATABASE_URL": database_url}
    ok = CliRunner().invoke(main, ["audit", "--json"], env=env)
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.output)
    assert doc["holds"] is True and len(doc["invariants"]) == len(Invariant)
    corrupt(engine, "UPDATE events SET replay = 1")
    bad = CliRunner().invoke(main, ["audit", "operator_audited", "--json"], env=env)
    assert bad.exit_code == 1
    doc = json.loads(bad.output)
    assert [c["invariant"] for c in doc["invariants"]] == ["operator_audited"]
    assert doc["violations"] == 1
    other = CliRunner().invoke(main, ["audit", "event_state"], env=env)
    assert other.exit_code == 0 and "event_state" in other.output
    since = CliRunner().invoke(
        main, ["audit", "operator_audited", "--since", "2999-01-01T00:00:00"], env=env
    )
    assert since.exit_code == 0, since.output  # nothing from then on
    yesterday = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).isoformat()
    earlier = CliRunner().invoke(main, ["audit", "operator_audited", "--since", yesterday], env=env)
    assert earlier.exit_code == 1 and "1 replays, 0 audited" in earlier.output
    inc = CliRunner().invoke(main, ["audit", "operator_audited", "--incremental"], env=env)
    assert inc.exit_code == 0, inc.output  # the full passes above moved the watermark past it
    unknown = CliRunner().invoke(main, ["audit", "no_such"], env=env)
    assert unknown.exit_code == 2 and "unknown invariant no_such" in unknown.output


def test_lease_repair_needs_a_second_operator_and_is_checked_after(
    client, engine, wsettings, forward, database_url
):
    decided(client, engine, wsettings, forward, "k1")
    with engine.connect() as conn:
        pid = conn.execute(text("SELECT public_id FROM events")).scalar_one()
    _expired_lease(engine, pid)
    audit.run(Runtime(wsettings, engine), [I.LEASE_RECLAIMED], full=True)
    with engine.connect() as conn:
        [v] = checks.open_violations(conn, "lease_reclaimed")
    proposed = audit.propose(Runtime(wsettings, engine), "alice", v.id)
    assert proposed.status == "awaiting_approval"
    assert proposed.preview["leases"][0]["public_id"] == pid
    with engine.connect() as conn:  # nothing changed yet
        assert conn.execute(text("SELECT state FROM events")).scalar_one() == "processing"
    with pytest.raises(Forbidden):
        audit.review(Runtime(wsettings, engine), "alice", proposed.public_id, approve=True)
    env = {"DATABASE_URL": database_url}
    r = CliRunner().invoke(
        main, ["repair", "approve", proposed.public_id, "--actor", "bob"], env=env
    )
    assert r.exit_code == 0, r.output
    done = json.loads(r.output)
    assert done["status"] == "applied" and done["reviewer"] == "bob"
    assert done["result"]["holds_after"] is True and done["result"]["done"]["requeued"] == 1
    with engine.connect() as conn:
        assert conn.execute(text("SELECT state FROM events")).scalar_one() == "received"
        actions = conn.execute(
            text(
                "SELECT actor, action FROM audit_log WHERE subject_kind = 'invariant_repair'"
                " ORDER BY id"
            )
        ).all()
        assert checks.open_violations(conn, "lease_reclaimed") == []
    assert [tuple(a) for a in actions] == [
        ("alice", "repair_proposed"),
        ("bob", "repair_applied"),
        ("bob", "repair_checked"),
    ]
    again = CliRunner().invoke(
        main, ["repair", "approve", proposed.public_id, "--actor", "carol"], env=env
    )
    assert again.exit_code == 1 and "not waiting" in again.output
    assert found(engine, wsettings, I.OPERATOR_AUDITED)["operator_audited"] == []


def test_no_repair_is_offered_where_it_could_double_an_effect(client, engine, wsettings, forward):
    decided(client, engine, wsettings, forward, "k1")
    corrupt(
        engine,
        "INSERT INTO event_attempts (event_id, attempt, error_class, outcome)"
        " SELECT id, 1, 'Boom', 'quarantined' FROM events",
    )
    audit.run(Runtime(wsettings, engine), [I.STEP_ONCE], full=True)
    with engine.connect() as conn:
        [v] = checks.open_violations(conn, "step_once")
    with pytest.raises(Exception, match="no safe repair"):
        audit.propose(Runtime(wsettings, engine), "alice", v.id)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM invariant_repairs")).scalar() == 0


def test_the_console_lists_each_violation_and_repairs_with_two_operators(
    client, app, engine, wsettings, forward
):
    from tests.integration.ui_support import CSRF, grab, new_token, sign_in

    decided(client, engine, wsettings, forward, "k1")
    with engine.connect() as conn:
        pid = conn.execute(text("SELECT public_id FROM events")).scalar_one()
    alice = new_token(engine, "alice", "operator")
    bob = new_token(engine, "bob", "operator")
    scoped = new_token(engine, "ops-t", "operator", forward.tenant)
    sign_in(client, alice)
    page = client.get("/ui/invariants").get_data(as_text=True)
    assert 'id="no-violations"' in page and 'href="/ui/invariants"' in page
    _expired_lease(engine, pid)
    corrupt(engine, "UPDATE events SET trace_id = 'cafe01'")
    audit.run(Runtime(wsettings, engine), full=True)
    with engine.connect() as conn:
        [v] = checks.open_violations(conn)
    page = client.get("/ui/invariants").get_data(as_text=True)
    assert f'data-violation="{v.id}"' in page and f"event:{pid}" in page
    assert "lease expired" in page and "not reclaimed" in page  # the row's problem
    assert "sweep&#39;s bound" in page or "sweep's bound" in page  # what it means
    assert 'data-field="trace">cafe01' in page and "lease_owner=dead" in page
    proposed = client.post(f"/ui/invariants/{v.id}/repair", data={"csrf": grab(CSRF, page)})
    assert proposed.status_code == 302
    page = client.get("/ui/invariants").get_data(as_text=True)
    repair_id = grab(r'data-repair="(rep_[0-9a-f]+)"', page)
    assert 'data-field="own-proposal"' in page and 'data-action="approve"' not in page
    url = f"/ui/invariants/repairs/{repair_id}/approve"
    assert client.post(url, data={"csrf": grab(CSRF, page)}).status_code == 403
    with engine.connect() as conn:
        assert conn.execute(text("SELECT state FROM events")).scalar_one() == "processing"

    other = app.test_client()
    sign_in(other, scoped)
    assert other.get("/ui/invariants").status_code == 403  # violations span tenants

    second = app.test_client()
    sign_in(second, bob)
    page = second.get("/ui/invariants").get_data(as_text=True)
    assert second.post(url, data={"csrf": grab(CSRF, page)}).status_code == 302
    with engine.connect() as conn:
        assert conn.execute(text("SELECT state FROM events")).scalar_one() == "received"
        assert checks.open_violations(conn) == []
    page = second.get("/ui/invariants").get_data(as_text=True)
    assert 'id="no-violations"' in page and "the violation is gone" in page


def test_an_intent_whose_event_retention_dropped_owes_nothing_and_is_pruned(
    client, engine, wsettings, forward
):
    endpoint(engine, forward.tenant)
    decided(client, engine, wsettings, forward, "k1")
    # As after retention dropped the day: the event and its delivery are gone.
    corrupt(engine, "DELETE FROM deliveries")
    assert len(found(engine, wsettings, I.DELIVERY_PER_ENDPOINT)["delivery_per_endpoint"]) == 1
    corrupt(engine, "DELETE FROM events")
    corrupt(engine, "UPDATE callback_intents SET created_at = now() - interval '2 days'")
    report = audit.run(Runtime(wsettings, engine), [I.DELIVERY_PER_ENDPOINT], full=True)
    assert report.violations == 0 and report.pruned_intents == 1
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM callback_intents")).scalar() == 0
