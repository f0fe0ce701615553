"""Deleting an endpoint: a soft delete that asks, explicitly, what becomes of the
deliveries it holds or waits on. Counted by rows, audit entries and what the sink got.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from inbox.domain import ledger
from inbox.domain.callbacks import CallbackSet, Outgoing
from inbox.domain.errors import Forbidden
from inbox.infra.config import Settings
from inbox.services import endpoint_delete, endpoint_state
from inbox.services.courier import deliver_once
from inbox.services.runtime import Runtime
from inbox.store.schema import partitions
from inbox.store.write import deliveries as dstore
from inbox.store.write import intents
from tests.integration.test_api import make_token
from tests.integration.test_callbacks import endpoint
from tests.integration.test_held_deliveries import states
from tests.integration.ui_support import new_token, post, sign_in


@pytest.fixture
def src(make_source):
    return make_source()


def enqueue(engine, src, count: int) -> set[int]:
    """``count`` callbacks of one step for every endpoint of the tenant; endpoints rung."""
    now = datetime.now(UTC)
    messages = [Outgoing("order.paid", {"n": i}, now) for i in range(count)]
    with engine.begin() as conn:
        evt = f"evt_{secrets.token_hex(6)}"
        return intents.enqueue(
            conn, [CallbackSet(src.tenant_id, src.tenant, None, evt, "s", messages)]
        )


def scalar(engine, sql: str, **params):
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


def audited(engine, ep) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT action FROM audit_log WHERE subject_kind = 'endpoint'"
                    " AND subject_id = :e ORDER BY id"
                ),
                {"e": ep.id},
            ).scalars()
        )


def runtime(engine, approval_min: int = 100) -> Runtime:
    url = engine.url.render_as_string(hide_password=False)
    return Runtime(Settings(database_url=url, held_discard_approval_min=approval_min), engine)


def test_a_delete_with_waiting_or_held_deliveries_is_refused_naming_them(client, engine, sink, src):
    ops = make_token(engine, "ops", "operator")
    ep = endpoint(engine, src.tenant, sink.script("/w"))
    enqueue(engine, src, 3)  # pending
    endpoint_state.set_paused(runtime(engine), "ops", None, ep.public_id, True)
    enqueue(engine, src, 2)  # held
    assert states(engine, ep.id) == {"held": 5}  # the pause held the three as well
    endpoint_state.set_paused(runtime(engine), "ops", None, ep.public_id, False)
    enqueue(engine, src, 1)
    assert states(engine, ep.id) == {"pending": 6}
    with engine.begin() as conn:  # two of them held again by a pause: both kinds named
        conn.execute(
            text(
                "UPDATE deliveries SET state = 'held' WHERE id IN (SELECT id FROM deliveries"
                " WHERE endpoint_id = :e ORDER BY id LIMIT 2)"
            ),
            {"e": ep.id},
        )
    before = audited(engine, ep)

    got = client.delete(f"/api/v1/endpoints/{ep.public_id}", headers=ops)
    assert got.status_code == 409
    err = got.get_json()["error"]
    assert (err["code"], err["held"], err["pending"]) == ("endpoint_has_deliveries", 2, 4)
    assert "6 deliveries" in err["message"] and "no release" in err["message"]
    released = client.delete(
        f"/api/v1/endpoints/{ep.public_id}", json={"held": "release"}, headers=ops
    )
    assert (
        released.status_code == 400
        and "cannot be released" in released.get_json()["error"]["message"]
    )
    no_reason = client.delete(
        f"/api/v1/endpoints/{ep.public_id}", json={"held": "discard"}, headers=ops
    )
    assert no_reason.status_code == 400
    cli = CliRunner().invoke(main, ["endpoints", "delete", ep.public_id, "--actor", "ops"])
    assert cli.exit_code != 0 and "6 deliveries not yet sent" in cli.output
    # Nothing changed: still listed, still sending, nothing discarded, nothing audited.
    assert states(engine, ep.id) == {"held": 2, "pending": 4}
    assert scalar(engine, "SELECT deleted_at FROM endpoints WHERE id = :e", e=ep.id) is None
    assert audited(engine, ep) == before
    viewer = make_token(engine, "vera", "viewer")
    assert client.delete(f"/api/v1/endpoints/{ep.public_id}", headers=viewer).status_code == 403


def test_a_delete_refused_while_a_delivery_is_being_sent(engine, src):
    ep = endpoint(engine, src.tenant, "http://127.0.0.1:9/busy")
    enqueue(engine, src, 2)
    with engine.begin() as conn:
        assert len(dstore.claim(conn, ep.id, "courier-a", 1, 30)) == 1
    with pytest.raises(Exception, match="being sent right now") as refused:
        endpoint_delete.delete_endpoint(runtime(engine), "ops", None, ep.public_id, "discard", "x")
    assert getattr(refused.value, "code", None) == "deliveries_in_flight"
    assert states(engine, ep.id) == {"sending": 1, "pending": 1}


def test_delete_with_discard_audits_each_and_then_nothing_is_made_sent_or_listed(
    client, engine, sink, src
):
    ep = endpoint(engine, src.tenant, sink.script("/gone"))
    other = endpoint(engine, src.tenant, sink.script("/other"))
    enqueue(engine, src, 3)
    out = CliRunner().invoke(
        main,
        [
            *("endpoints", "delete", ep.public_id),
            *("--held", "discard", "--reason", "tenant left", "--actor", "alice"),
        ],
    )
    assert out.exit_code == 0, out.output
    assert f"deleted {ep.public_id}; 3 held deliveries discarded" in out.output
    assert states(engine, ep.id) == {"failed": 3}
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT deleted_at, deleted_by, enabled FROM endpoints WHERE id = :e"),
            {"e": ep.id},
        ).one()
        per_delivery = conn.execute(
            text(
                "SELECT a.actor, a.detail->>'reason' FROM audit_log a JOIN deliveries d"
                " ON d.id = a.subject_id WHERE a.subject_kind = 'delivery'"
                " AND a.action = 'discard' AND d.endpoint_id = :e"
            ),
            {"e": ep.id},
        ).all()
    assert row.deleted_at is not None and row.deleted_by == "alice" and not row.enabled
    assert sorted(per_delivery) == [("alice", "tenant left")] * 3
    assert audited(engine, ep)[-1] == "delete"

    # No new deliveries for it; the other endpoint still gets its own.
    rung = enqueue(engine, src, 2)
    assert rung == {other.id}
    assert states(engine, ep.id) == {"failed": 3}
    assert deliver_once(engine, ep.id, allow_private=True).claimed == 0
    assert sink.at("/gone") == []
    # A dead letter of a deleted endpoint is not replayed (nothing would send it).
    with engine.begin() as conn:
        dead = conn.execute(
            text("SELECT public_id FROM deliveries WHERE endpoint_id = :e"), {"e": ep.id}
        ).scalars()
        assert dstore.replay(conn, list(dead), "alice") == []

    # Gone from the listings (CLI, API, console); shown by its id, and with --deleted.
    listed = json.loads(CliRunner().invoke(main, ["endpoints", "list", "--json"]).output)
    assert [e["endpoint"] for e in listed] == [other.public_id]
    both = json.loads(CliRunner().invoke(main, ["endpoints", "list", "--deleted", "--json"]).output)
    assert {e["endpoint"]: e["deleted"] for e in both} == {
        ep.public_id: True,
        other.public_id: False,
    }
    viewer = make_token(engine, "vera", "viewer")
    api = client.get("/api/v1/endpoints", headers=viewer).get_json()["data"]
    assert [e["endpoint"] for e in api] == [other.public_id]
    shown = client.get(f"/api/v1/endpoints/{ep.public_id}", headers=viewer).get_json()
    assert shown["deleted_at"] is not None
    from prometheus_client.exposition import generate_latest

    from web.metrics import build_registry

    exposed = generate_latest(build_registry(engine)).decode()
    assert other.public_id in exposed and ep.public_id not in exposed  # nor in /metrics
    # Its levers are gone: enabling, pausing or deleting it again is a 404.
    ops = make_token(engine, "ops", "operator")
    for verb in ("enable", "resume", "pause"):
        assert client.post(f"/api/v1/endpoints/{ep.public_id}/{verb}", headers=ops).status_code == (
            404
        )
    assert client.delete(f"/api/v1/endpoints/{ep.public_id}", headers=ops).status_code == 404
    rotate = CliRunner().invoke(main, ["endpoints", "rotate", ep.public_id, "--actor", "ops"])
    assert rotate.exit_code != 0 and "No endpoint" in rotate.output


def test_a_delete_past_the_threshold_waits_for_a_second_operator_and_holds_meanwhile(
    client, engine, sink, src
):
    ep = endpoint(engine, src.tenant, sink.script("/big"))
    enqueue(engine, src, 3)
    rt = runtime(engine, approval_min=2)
    asked = endpoint_delete.delete_endpoint(rt, "alice", None, ep.public_id, "discard", "gone")
    assert not asked.deleted and asked.discard is not None
    assert (asked.discard.status, asked.discard.held) == ("awaiting", 3)
    # Disabled, not deleted: everything is held, never attempted, never pruned.
    assert states(engine, ep.id) == {"held": 3}
    assert scalar(engine, "SELECT deleted_at FROM endpoints WHERE id = :e", e=ep.id) is None
    assert deliver_once(engine, ep.id, allow_private=True).claimed == 0
    with engine.connect() as conn:
        first = conn.execute(
            text("SELECT min(id) FROM deliveries WHERE endpoint_id = :e"), {"e": ep.id}
        ).scalar_one()
        assert partitions.contents(conn, ledger.day_of(first)).unfinished_deliveries >= 3
    enqueue(engine, src, 1)  # made while it waits: held too
    with pytest.raises(Forbidden):
        endpoint_state.approve_discard(rt, "alice", None, ep.public_id)
    done = endpoint_state.approve_discard(rt, "bob", None, ep.public_id)
    assert done.delete_endpoint and done.discarded == 3
    assert states(engine, ep.id) == {"failed": 4}  # the later one went with it
    assert scalar(engine, "SELECT deleted_by FROM endpoints WHERE id = :e", e=ep.id) == "bob"
    assert audited(engine, ep) == ["request delete", "approve discard held", "delete"]
    assert sink.at("/big") == []


def test_the_api_answers_202_while_the_discard_awaits_then_200_for_a_clean_delete(
    client, engine, src
):
    ops = make_token(engine, "ops", "operator")
    ep = endpoint(engine, src.tenant, "http://127.0.0.1:9/a")
    enqueue(engine, src, 101)  # past the default threshold, 100
    got = client.delete(
        f"/api/v1/endpoints/{ep.public_id}?held=discard&reason=tenant%20left", headers=ops
    )
    assert got.status_code == 202
    body = got.get_json()
    assert body["deleted"] is False and body["discard"]["status"] == "awaiting"
    assert body["discard"]["held"] == 101 and body["discard"]["delete_endpoint"] is True
    clean = endpoint(engine, src.tenant, "http://127.0.0.1:9/b")
    done = client.delete(f"/api/v1/endpoints/{clean.public_id}", headers=ops)
    assert done.status_code == 200 and done.get_json() == {
        "endpoint": clean.public_id,
        "deleted": True,
        "discard": None,
    }
    assert audited(engine, clean) == ["delete"]


def test_the_console_deletes_with_a_reason_and_the_endpoint_leaves_the_list(
    client, engine, make_source
):
    src = make_source(tenant="ta", name="billing")
    ep = endpoint(engine, "ta", "http://127.0.0.1:9/c")
    enqueue(engine, src, 2)
    sign_in(client, new_token(engine, "alice-oncall", "operator"))
    page = f"/ui/endpoints/{ep.public_id}"
    shown = client.get(page).get_data(as_text=True)
    assert "2 waiting deliveries: deleting discards them" in shown and "cannot be released" in shown
    refused = post(client, f"{page}/delete", page)  # no choice made: refused, nothing changes
    assert refused.status_code == 409
    resp = post(client, f"{page}/delete", page, held="discard", reason="tenant left")
    assert resp.status_code == 302 and resp.headers["Location"].endswith("/ui/endpoints")
    assert states(engine, ep.id) == {"failed": 2}
    assert "deleted: it is sent nothing" in client.get("/ui/endpoints").get_data(as_text=True)
    assert ep.public_id not in client.get("/ui/endpoints").get_data(as_text=True)  # no flash
    assert "Deleted" in client.get(page).get_data(as_text=True)
