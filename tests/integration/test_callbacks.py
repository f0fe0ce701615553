"""Outbound callbacks against a real local HTTP sink, through the courier's plain function."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from standardwebhooks import Webhook

from inbox.cli import main
from inbox.domain import callbacks
from inbox.domain.records import Endpoint
from inbox.infra.config import Settings
from inbox.services.courier import deliver_once
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.reads import endpoints as ereads
from inbox.store.write import deliveries as dstore
from inbox.store.write import endpoints as estore
from tests.helpers import body_of, hmac_headers, wait_for
from tests.sink import Answer


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    return Settings(database_url=settings.database_url)


def endpoint(engine, tenant: str, url: str, secret: str | None = None, **opts) -> Endpoint:
    with engine.begin() as conn:
        opts.setdefault("retry_schedule", [0])
        return estore.create_endpoint(conn, tenant, url, secret or callbacks.new_secret(), **opts)


def decide(client, engine, wsettings, src, key: str = "k", payload=None) -> set[int]:
    """Accept an event for a `forward` source and run its playbook: deliveries are written."""
    body = body_of(payload or {"type": "fraud.alert", "account": "acct-1"})
    assert (
        client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key)).status_code
        == 202
    )
    rung: set[int] = set()
    drain_once(Runtime(wsettings, engine), notify=rung.update)
    return rung


def send_all(engine, endpoint_id: int, **kw) -> None:
    """Deliver until no delivery is pending or sending (a retry waits for its time)."""

    def sent() -> bool:
        deliver_once(engine, endpoint_id, allow_private=True, **kw)
        with engine.connect() as conn:
            left = conn.execute(
                text("SELECT count(*) FROM deliveries WHERE state IN ('pending', 'sending')")
            ).scalar_one()
        return not left

    wait_for(sent)


def delivery(engine):
    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM deliveries")).one()


@pytest.fixture
def forward_source(make_source):
    return make_source(playbook="forward", event_type_path="type")


def test_500_500_200_three_attempts_one_id_fresh_verifying_signatures(
    client, engine, wsettings, sink, forward_source
):
    secret = callbacks.new_secret()
    ep = endpoint(
        engine,
        forward_source.tenant,
        sink.script("/hook", Answer(500), Answer(500), Answer(200)),
        secret,
    )
    assert decide(client, engine, wsettings, forward_source) == {ep.id}
    send_all(engine, ep.id)
    got = sink.at("/hook")
    assert len(got) == 3
    assert len({r.headers["webhook-id"] for r in got}) == 1
    assert all(r.headers["idempotency-key"] == r.headers["webhook-id"] for r in got)
    assert len({r.body for r in got}) == 1  # created_at fixed at creation
    for r in got:
        Webhook(secret).verify(r.body, r.headers)  # raises if any signature is wrong
    doc = json.loads(got[0].body)
    assert set(doc) == {"id", "type", "tenant", "created_at", "data"}
    assert doc["id"] == got[0].headers["webhook-id"] and doc["type"] == "fraud.alert"
    assert doc["tenant"] == forward_source.tenant and doc["data"]["account"] == "acct-1"
    d = delivery(engine)
    assert d.state == "delivered" and d.attempts == 3 and d.last_status == 200
    with engine.connect() as conn:
        log = conn.execute(text("SELECT status FROM delivery_attempts ORDER BY id")).scalars()
        assert list(log) == [500, 500, 200]


def test_400_is_tried_once_then_replayed_with_the_same_id(
    client, engine, wsettings, sink, forward_source, database_url
):
    ep = endpoint(
        engine,
        forward_source.tenant,
        sink.script("/h", Answer(400, body=b'{"token":"abcd"}'), Answer(200)),
    )
    decide(client, engine, wsettings, forward_source)
    send_all(engine, ep.id)
    d = delivery(engine)
    assert d.state == "failed" and d.attempts == 1 and len(sink.at("/h")) == 1
    runner = CliRunner()
    out = runner.invoke(main, ["deliveries", "list", "--state", "failed"]).output
    assert d.public_id in out
    shown = runner.invoke(main, ["deliveries", "show", d.public_id]).output
    assert "400" in shown and "abcd" not in shown  # the excerpt is redacted
    detail = json.loads(runner.invoke(main, ["deliveries", "show", d.public_id, "--json"]).output)
    assert [a["status"] for a in detail["attempts_log"]] == [400]
    assert "abcd" not in json.dumps(detail)
    out = runner.invoke(main, ["deliveries", "replay", d.public_id, "--actor", "ops"]).output
    assert "replayed 1 of 1" in out
    send_all(engine, ep.id)
    got = sink.at("/h")
    assert len(got) == 2 and got[0].headers["webhook-id"] == got[1].headers["webhook-id"]
    assert delivery(engine).state == "delivered"
    again = runner.invoke(main, ["deliveries", "show", d.public_id, "--json"]).output
    assert [a["actor"] for a in json.loads(again)["audit"]] == ["ops"]


def test_429_retry_after_is_honoured(client, engine, wsettings, sink, forward_source):
    ep = endpoint(
        engine,
        forward_source.tenant,
        sink.script("/r", Answer(429, {"Retry-After": "1"}), Answer(200)),
    )
    decide(client, engine, wsettings, forward_source)
    deliver_once(engine, ep.id, allow_private=True)
    assert deliver_once(engine, ep.id, allow_private=True).claimed == 0  # not before 1 s
    wait_for(lambda: deliver_once(engine, ep.id, allow_private=True).delivered == 1)
    got = sink.at("/r")
    assert got[1].at - got[0].at >= 1.0


def test_a_timeout_retries(client, engine, wsettings, sink, forward_source):
    ep = endpoint(
        engine,
        forward_source.tenant,
        sink.script("/t", Answer(200, delay=2), Answer(200)),
        timeout_ms=300,
    )
    decide(client, engine, wsettings, forward_source)
    first = deliver_once(engine, ep.id, allow_private=True)
    assert first.retried == 1
    with engine.connect() as conn:
        assert (
            conn.execute(text("SELECT error_class FROM delivery_attempts")).scalar_one()
            == "timeout"
        )
    with engine.connect() as conn:
        assert ereads.get_endpoint(conn, ep.id).failing  # unreachable: one courier at a time
    send_all(engine, ep.id)
    assert delivery(engine).state == "delivered" and delivery(engine).attempts == 2
    with engine.connect() as conn:
        assert not ereads.get_endpoint(conn, ep.id).failing  # it answered again


def test_410_disables_the_endpoint(client, engine, wsettings, sink, forward_source):
    ep = endpoint(engine, forward_source.tenant, sink.script("/g", Answer(410)))
    decide(client, engine, wsettings, forward_source)
    send_all(engine, ep.id)
    assert delivery(engine).state == "failed"
    with engine.connect() as conn:
        now = ereads.get_endpoint(conn, ep.id)
    assert not now.enabled and "410" in (now.disabled_reason or "")
    # a disabled endpoint's new deliveries are held, not sent and not dropped
    assert decide(client, engine, wsettings, forward_source, key="k2") == set()
    with engine.connect() as conn:
        got = conn.execute(text("SELECT state FROM deliveries ORDER BY id")).scalars()
        assert list(got) == ["failed", "held"]


def test_attempt_limit_makes_a_dead_letter(client, engine, wsettings, sink, forward_source):
    ep = endpoint(engine, forward_source.tenant, sink.script("/x", Answer(503)), max_attempts=3)
    decide(client, engine, wsettings, forward_source)
    send_all(engine, ep.id)
    d = delivery(engine)
    assert d.state == "failed" and d.attempts == 3 and len(sink.at("/x")) == 3


def test_rotation_overlap_both_secrets_sign(client, engine, wsettings, sink, forward_source):
    old = callbacks.new_secret()
    ep = endpoint(engine, forward_source.tenant, sink.script("/rot", Answer(200)), old)
    with engine.begin() as conn:
        new = callbacks.new_secret()
        estore.add_secret(conn, ep, new)
    decide(client, engine, wsettings, forward_source)
    send_all(engine, ep.id)
    [got] = sink.at("/rot")
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    Webhook(old).verify(got.body, got.headers)
    Webhook(new).verify(got.body, got.headers)


def test_private_targets_are_refused_without_the_setting(
    client, engine, wsettings, sink, forward_source
):
    ep = endpoint(engine, forward_source.tenant, sink.script("/ssrf", Answer(200)))
    decide(client, engine, wsettings, forward_source)
    deliver_once(engine, ep.id, allow_private=False)
    d = delivery(engine)
    assert d.state == "failed" and d.last_error == "blocked"
    assert sink.at("/ssrf") == []


def test_event_type_filter(client, engine, wsettings, sink, forward_source):
    ep = endpoint(engine, forward_source.tenant, sink.script("/f"), event_types=["other.type"])
    assert decide(client, engine, wsettings, forward_source) == set()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM deliveries")).scalar_one() == 0
    assert ep.event_types == ("other.type",)


def test_concurrency_per_endpoint_is_bounded(client, engine, wsettings, forward_source, sink):
    ep = endpoint(engine, forward_source.tenant, sink.script("/c"), max_in_flight=1)
    for i in range(3):
        decide(client, engine, wsettings, forward_source, key=f"k{i}")
    with engine.begin() as conn:
        first = dstore.claim(conn, ep.id, "a", 1, 30)
    with engine.begin() as conn:
        assert dstore.claim(conn, ep.id, "b", 1, 30) == []  # the one slot is taken
    done = SimpleNamespace(
        claim=first[0],
        at=datetime.now(UTC),
        state="delivered",
        status=200,
        error=None,
        delay=0.0,
        latency_ms=1.0,
        excerpt=None,
    )
    with engine.begin() as conn:
        assert dstore.finish_many(conn, [done]) == {first[0].id}
    with engine.begin() as conn:
        assert len(dstore.claim(conn, ep.id, "b", 1, 30)) == 1


def test_a_dead_endpoint_does_not_hold_back_another(client, engine, wsettings, sink, make_source):
    src = make_source(playbook="forward", event_type_path="type")
    dead = endpoint(engine, src.tenant, sink.script("/dead", Answer(200, delay=3)), timeout_ms=2000)
    live = endpoint(engine, src.tenant, sink.script("/live"))
    for i in range(20):
        decide(client, engine, wsettings, src, key=f"k{i}")
    slow = threading.Thread(
        target=deliver_once, args=(engine, dead.id), kwargs={"allow_private": True}
    )
    slow.start()
    wait_for(lambda: len(sink.at("/dead")) == 1)  # its courier now waits out its timeout
    started = time.monotonic()
    result = deliver_once(engine, live.id, allow_private=True)
    took = time.monotonic() - started
    slow.join()
    assert result.delivered == 20 and took < 1.5
    assert len(sink.at("/dead")) == 1  # one timeout, then the rest of its batch was handed back
    with engine.connect() as conn:
        pending = conn.execute(
            text(
                "SELECT count(*) FROM deliveries WHERE endpoint_id = :e AND state = 'pending'"
                " AND attempts = 0"
            ),
            {"e": dead.id},
        ).scalar_one()
    assert pending == 19


def test_a_failing_endpoint_gets_one_courier_at_a_time(
    client, engine, wsettings, forward_source, sink
):
    ep = endpoint(engine, forward_source.tenant, sink.script("/one"), max_in_flight=4)
    for i in range(3):
        decide(client, engine, wsettings, forward_source, key=f"k{i}")
    with engine.begin() as conn:
        dstore.set_failing(conn, ep.id, True)
        assert len(dstore.claim(conn, ep.id, "a", 1, 30)) == 1
    with engine.begin() as conn:
        assert dstore.claim(conn, ep.id, "b", 1, 30) == []  # healthy, it would take 4
        dstore.set_failing(conn, ep.id, False)
    with engine.begin() as conn:
        assert len(dstore.claim(conn, ep.id, "c", 1, 30)) == 1
