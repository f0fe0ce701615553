"""Nothing is dropped: a paused or disabled endpoint's callbacks are held, then released in
their original order or discarded by operators (two of them past a threshold), and audited.

Counted by rows and by what the sink received per webhook-id, never by status codes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from inbox.domain import ledger
from inbox.domain.callbacks import CallbackSet
from inbox.domain.errors import Forbidden
from inbox.domain.held import NothingHeld
from inbox.infra.config import Settings
from inbox.services import endpoint_state
from inbox.services.courier import deliver_once
from inbox.services.runtime import Runtime
from inbox.store.schema import partitions
from inbox.store.write import deliveries as dstore
from inbox.store.write import intents
from tests.integration.test_callbacks import decide, endpoint, send_all
from tests.sink import Answer


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    return Settings(database_url=settings.database_url)


@pytest.fixture
def forward_source(make_source):
    return make_source(playbook="forward", event_type_path="type")


def states(engine, endpoint_id: int) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT state, count(*) FROM deliveries WHERE endpoint_id = :e GROUP BY state"),
            {"e": endpoint_id},
        )
        return {r[0]: r[1] for r in rows}


def made_order(engine, endpoint_id: int) -> list[str]:
    """The endpoint's webhook-ids in the order their deliveries were made."""
    with engine.connect() as conn:
        return list(
            conn.execute(
                text("SELECT public_id FROM deliveries WHERE endpoint_id = :e ORDER BY id"),
                {"e": endpoint_id},
            ).scalars()
        )


def cli(*args: str) -> str:
    got = CliRunner().invoke(main, list(args))
    assert got.exit_code == 0, got.output
    return got.output


def test_after_a_410_every_callback_is_held_and_enable_sends_each_once_in_order(
    client, engine, wsettings, sink, forward_source
):
    url = sink.script("/gone", Answer(410))
    ep = endpoint(engine, forward_source.tenant, url)
    decide(client, engine, wsettings, forward_source, key="first")
    send_all(engine, ep.id)  # 410: the endpoint is disabled, that delivery is a dead letter
    assert states(engine, ep.id) == {"failed": 1}
    rung: set[int] = set()
    for i in range(20):
        rung |= decide(client, engine, wsettings, forward_source, key=f"k{i}")
    assert ep.id not in rung  # nothing to send yet
    assert states(engine, ep.id) == {"failed": 1, "held": 20}
    assert deliver_once(engine, ep.id, allow_private=True).claimed == 0  # never attempted
    assert len(sink.at("/gone")) == 1
    listed = json.loads(cli("endpoints", "list", "--json"))
    assert [(e["enabled"], e["held"], e["waiting"]) for e in listed] == [(False, 20, 0)]
    held = json.loads(cli("deliveries", "list", "--state", "held", "--json"))
    assert len(held) == 20
    sink.script("/gone", Answer(200))  # the receiver is back
    assert "20 held deliveries released" in cli("endpoints", "enable", ep.public_id)
    send_all(engine, ep.id)
    got = [r.headers["webhook-id"] for r in sink.at("/gone")[1:]]
    assert got == made_order(engine, ep.id)[1:]  # each once, in the order they were made
    assert states(engine, ep.id) == {"failed": 1, "delivered": 20}


def test_the_help_promise_a_disabled_endpoints_deliveries_wait(
    client, engine, wsettings, sink, forward_source
):
    assert "deliveries wait" in cli("endpoints", "disable", "--help")
    ep = endpoint(engine, forward_source.tenant, sink.script("/w"))
    decide(client, engine, wsettings, forward_source, key="before")  # pending when disabled
    assert "1 more deliveries held" in cli("endpoints", "disable", ep.public_id, "--actor", "a")
    decide(client, engine, wsettings, forward_source, key="during")
    assert states(engine, ep.id) == {"held": 2}
    send_all(engine, ep.id)
    assert sink.at("/w") == []
    cli("endpoints", "enable", ep.public_id, "--actor", "a")
    send_all(engine, ep.id)
    assert [r.headers["webhook-id"] for r in sink.at("/w")] == made_order(engine, ep.id)


def test_pause_holds_resume_releases_and_a_disabled_one_stays_held(
    client, engine, wsettings, sink, forward_source
):
    ep = endpoint(engine, forward_source.tenant, sink.script("/p"))
    cli("endpoints", "pause", ep.public_id)
    decide(client, engine, wsettings, forward_source, key="a")
    cli("endpoints", "disable", ep.public_id)
    assert "0 held deliveries released" not in cli("endpoints", "resume", ep.public_id)
    assert states(engine, ep.id) == {"held": 1}  # still disabled: still held
    shown = json.loads(cli("endpoints", "show", ep.public_id, "--json"))
    assert (shown["paused"], shown["enabled"], shown["held"]) == (False, False, 1)
    cli("endpoints", "enable", ep.public_id)
    send_all(engine, ep.id)
    assert states(engine, ep.id) == {"delivered": 1} and len(sink.at("/p")) == 1


def test_a_retry_or_an_expired_lease_while_disabled_is_held_not_attempted(
    client, engine, wsettings, sink, forward_source
):
    ep = endpoint(engine, forward_source.tenant, sink.script("/r"))
    decide(client, engine, wsettings, forward_source, key="a")
    decide(client, engine, wsettings, forward_source, key="b")
    with engine.begin() as conn:
        first, _second = dstore.claim(conn, ep.id, "courier-1", 2, 0.0)
    rt = Runtime(wsettings, engine)
    endpoint_state.set_enabled(rt, "ops", None, ep.public_id, False)
    retry = SimpleNamespace(
        claim=first,
        at=datetime.now(UTC),
        state="pending",
        status=503,
        error="HTTP 503",
        delay=0.0,
        latency_ms=1.0,
        excerpt=None,
    )
    with engine.begin() as conn:
        assert dstore.finish_many(conn, [retry]) == {first.id}
    with engine.begin() as conn:
        assert dstore.sweep(conn) == []  # the second's lease expired: held, nothing to ring
    assert states(engine, ep.id) == {"held": 2}


def test_held_deliveries_keep_their_day_from_retention(client, engine, wsettings, forward_source):
    ep = endpoint(engine, forward_source.tenant, "http://127.0.0.1:9/never", enabled=False)
    decide(client, engine, wsettings, forward_source)
    with engine.connect() as conn:
        row = conn.execute(text("SELECT id FROM deliveries WHERE endpoint_id = :e"), {"e": ep.id})
        day = ledger.day_of(row.scalar_one())
        assert partitions.contents(conn, day).unfinished_deliveries == 1


def test_discard_asks_a_reason_is_audited_and_past_the_threshold_needs_two_operators(
    client, engine, wsettings, sink, forward_source, monkeypatch
):
    ep = endpoint(engine, forward_source.tenant, sink.script("/d"), enabled=False)
    for i in range(3):
        decide(client, engine, wsettings, forward_source, key=f"k{i}")
    rt = Runtime(Settings(database_url=wsettings.database_url, held_discard_approval_min=2), engine)
    with pytest.raises(Exception, match="reason"):
        endpoint_state.discard_held(rt, "alice", None, ep.public_id, "  ")
    asked = endpoint_state.discard_held(rt, "alice", None, ep.public_id, "tenant left")
    assert (asked.status, asked.held, asked.discarded) == ("awaiting", 3, 0)
    decide(client, engine, wsettings, forward_source, key="later")  # not covered by the ask
    with pytest.raises(Forbidden):
        endpoint_state.approve_discard(rt, "alice", None, ep.public_id)
    assert states(engine, ep.id) == {"held": 4}
    done = endpoint_state.approve_discard(rt, "bob", None, ep.public_id)
    assert (done.status, done.discarded, done.decided_by) == ("discarded", 3, "bob")
    assert states(engine, ep.id) == {"failed": 3, "held": 1}
    with engine.connect() as conn:
        audit = conn.execute(
            text(
                "SELECT a.actor, a.detail->>'reason' FROM audit_log a JOIN deliveries d"
                " ON d.id = a.subject_id WHERE a.subject_kind = 'delivery'"
                " AND a.action = 'discard' AND d.endpoint_id = :e"
            ),
            {"e": ep.id},
        ).all()
        errors = conn.execute(
            text("SELECT DISTINCT last_error FROM deliveries WHERE state = 'failed'")
        ).scalars()
        assert list(errors) == ["discarded by bob: tenant left"]
    assert sorted(audit) == [("bob", "tenant left")] * 3
    small = endpoint_state.discard_held(rt, "carol", None, ep.public_id, "stale")
    assert (small.status, small.discarded) == ("discarded", 1)  # one: at once
    with pytest.raises(NothingHeld):
        endpoint_state.discard_held(rt, "carol", None, ep.public_id, "again")
    assert sink.at("/d") == []


def test_enabling_withdraws_an_awaiting_discard_and_sends_everything(
    client, engine, wsettings, sink, forward_source
):
    ep = endpoint(engine, forward_source.tenant, sink.script("/e"), enabled=False)
    for i in range(2):
        decide(client, engine, wsettings, forward_source, key=f"k{i}")
    rt = Runtime(Settings(database_url=wsettings.database_url, held_discard_approval_min=1), engine)
    endpoint_state.discard_held(rt, "alice", None, ep.public_id, "tenant left")
    endpoint_state.set_enabled(rt, "bob", None, ep.public_id, True)
    with pytest.raises(Exception, match="No discard"):
        endpoint_state.approve_discard(rt, "carol", None, ep.public_id)
    send_all(engine, ep.id)
    assert len({r.headers["webhook-id"] for r in sink.at("/e")}) == 2


def test_metrics_show_the_same_state_and_the_held_count(client, engine, wsettings, forward_source):
    from prometheus_client.exposition import generate_latest

    from tests.integration.test_metrics import parse, value
    from web.metrics import build_registry

    off = endpoint(engine, forward_source.tenant, "http://127.0.0.1:9/off", enabled=False)
    on = endpoint(engine, forward_source.tenant, "http://127.0.0.1:9/on")
    decide(client, engine, wsettings, forward_source)
    with engine.begin() as conn:
        conn.execute(text("UPDATE endpoints SET circuit = 'open' WHERE id = :e"), {"e": on.id})
    samples = parse(generate_latest(build_registry(engine)).decode())
    tenant = forward_source.tenant

    def state(ep, name: str) -> float | None:
        return value(
            samples, "inbox_endpoint_state", tenant=tenant, endpoint=ep.public_id, state=name
        )

    assert state(off, "disabled") == 1 and state(off, "healthy") == 0
    assert state(on, "open_circuit") == 1 and state(on, "disabled") == 0
    held = value(samples, "inbox_endpoint_held_deliveries", tenant=tenant, endpoint=off.public_id)
    assert held == 1
    shown = json.loads(cli("endpoints", "list", "--json"))
    assert {e["endpoint"]: e["state"] for e in shown} == {
        off.public_id: "disabled",
        on.public_id: "open_circuit",
    }


def test_the_api_shows_held_and_releases_or_discards_with_two_operators(
    client, engine, sink, forward_source
):
    from inbox.domain.callbacks import Outgoing
    from tests.integration.test_api import make_token

    alice = make_token(engine, "alice", "operator")
    bob = make_token(engine, "bob", "operator")
    viewer = make_token(engine, "vera", "viewer")
    ep = endpoint(engine, forward_source.tenant, sink.script("/api"))
    base = f"/api/v1/endpoints/{ep.public_id}"
    assert client.post(f"{base}/pause", headers=viewer).status_code == 403
    paused = client.post(f"{base}/pause", headers=alice).get_json()
    assert paused == {"endpoint": ep.public_id, "sends": False, "held": 0, "released": 0}
    many = [Outgoing("order.paid", {"n": i}, datetime.now(UTC)) for i in range(101)]
    with engine.begin() as conn:  # one step's 101 callbacks: past the default threshold, 100
        t = forward_source.tenant_id
        intents.enqueue(conn, [CallbackSet(t, forward_source.tenant, None, "evt_api", "s", many)])
    shown = client.get(base, headers=viewer).get_json()
    assert (shown["state"], shown["held"], shown["waiting"]) == ("paused", 101, 0)
    assert client.post(f"{base}/discard", json={}, headers=alice).status_code == 400
    asked = client.post(f"{base}/discard", json={"reason": "tenant left"}, headers=alice)
    assert asked.get_json()["status"] == "awaiting" and asked.get_json()["held"] == 101
    assert client.post(f"{base}/discard/approve", headers=alice).status_code == 403
    assert client.post(f"{base}/discard/withdraw", headers=bob).get_json()["status"] == (
        "withdrawn"
    )
    resumed = client.post(f"{base}/resume", headers=bob).get_json()
    assert (resumed["sends"], resumed["released"]) == (True, 101)
    send_all(engine, ep.id)
    assert [r.headers["webhook-id"] for r in sink.at("/api")] == made_order(engine, ep.id)
    listed = client.get("/api/v1/endpoints", headers=viewer).get_json()["data"]
    assert [(e["endpoint"], e["state"], e["held"]) for e in listed] == [
        (ep.public_id, "healthy", 0)
    ]


def test_limits_are_set_from_the_cli_and_the_api_and_audited(client, engine, forward_source):
    from tests.integration.test_api import make_token

    ep = endpoint(engine, forward_source.tenant, "http://127.0.0.1:9/l")
    out = cli("endpoints", "limit", ep.public_id, "--rate", "5", "--max-in-flight", "2")
    assert "5/s, at most 2 in flight" in out
    shown = json.loads(cli("endpoints", "show", ep.public_id, "--json"))
    assert (shown["rate_per_second"], shown["max_in_flight"]) == (5.0, 2)
    ops, viewer = make_token(engine, "ops", "operator"), make_token(engine, "vera", "viewer")
    url = f"/api/v1/endpoints/{ep.public_id}/limits"
    assert client.post(url, json={"rate_per_second": 3}, headers=viewer).status_code == 403
    for bad in ({}, {"rate_per_second": -1}, {"max_in_flight": 0}, {"rate": 1}):
        assert client.post(url, json=bad, headers=ops).status_code == 400, bad
    got = client.post(url, json={"rate_per_second": None}, headers=ops).get_json()
    assert (got["rate_per_second"], got["max_in_flight"]) == (None, 2)
    with engine.connect() as conn:
        actions = conn.execute(
            text(
                "SELECT actor, detail->>'rate_per_second' FROM audit_log"
                " WHERE action = 'limits' ORDER BY id"
            )
        ).all()
    assert [tuple(a) for a in actions] == [(os_user(), "5.0"), ("ops", None)]


def os_user() -> str:
    import getpass

    return getpass.getuser()


def _stored(engine, endpoint_id: int) -> tuple[object, ...]:
    """What a lever on the endpoint could change: its row, the audit log, discards."""
    with engine.connect() as conn:
        return (
            conn.execute(
                text("SELECT to_jsonb(e) FROM endpoints e WHERE id = :id"), {"id": endpoint_id}
            ).scalar_one(),
            conn.execute(text("SELECT count(*) FROM audit_log")).scalar_one(),
            conn.execute(text("SELECT count(*) FROM held_discards")).scalar_one(),
        )


def test_a_bad_body_to_an_endpoint_lever_names_each_field_and_stores_nothing(
    client, engine, forward_source
):
    from tests.integration.test_api import make_token

    ep = endpoint(engine, forward_source.tenant, "http://127.0.0.1:9/b")
    ops = make_token(engine, "ops", "operator")
    base = f"/api/v1/endpoints/{ep.public_id}"
    before = _stored(engine, ep.id)
    cases = [
        ("post", "/limits", {"rate_per_second": "5", "max_in_flight": 0, "burst": 1}),
        ("post", "/order", {"ordered": "true", "strict": True}),
        ("post", "/discard", {"reason": 7, "all": True}),
        ("delete", "", {"held": 1, "reason": ["x"]}),
    ]
    for method, path, body in cases:
        resp = getattr(client, method)(base + path, json=body, headers=ops)
        assert resp.status_code == 400, (path, resp.get_json())
        error = resp.get_json()["error"]
        assert set(error["fields"]) == set(body), path
        assert all(name in error["message"] for name in body), error["message"]
    assert _stored(engine, ep.id) == before
