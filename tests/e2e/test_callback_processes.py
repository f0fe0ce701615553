"""Outbound callbacks with real worker, courier and beat processes."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from sqlalchemy import text

from inbox.domain import callbacks
from inbox.domain.sources import SourceOptions
from inbox.store.write import endpoints as estore
from inbox.store.write import sources as sstore
from tests import helpers
from tests.brokers import Broker
from tests.e2e.test_worker_processes import wait_for
from tests.helpers import body_of, hmac_headers
from tests.procs import CeleryProc, Web
from tests.sink import Answer

pytestmark = pytest.mark.e2e


@pytest.fixture
def env(database_url: str, broker: Broker) -> dict[str, str]:
    """Every test here runs twice: Redis as the broker, and a RabbitMQ vhost of its own."""
    return {
        "DATABASE_URL": database_url,
        **broker.env,
        "INBOX_LEASE_SECONDS": "3",
        "INBOX_SWEEP_SECONDS": "1",
        "INBOX_ALLOW_PRIVATE_TARGETS": "1",
    }


def states(engine) -> list[tuple[str, int]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT state, attempts FROM deliveries"))]


def delivery_ids(engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(text("SELECT public_id FROM deliveries")).scalars())


def test_our_own_standard_receiver_accepts_what_we_send(env, procs, make_source, engine):
    """A decision forwarded to an endpoint that is another tenant's `standard` source."""
    secret = callbacks.new_secret()
    web = Web(env)
    procs.append(web)
    src = make_source(playbook="forward", event_type_path="type")
    with engine.begin() as conn:
        sstore.create_tenant(conn, "receiver")
        inbound = sstore.create_source(
            conn, "receiver", "std", "standard", [secret], SourceOptions()
        )
        estore.create_endpoint(
            conn, src.tenant, f"http://127.0.0.1:{web.port}{inbound.path}", secret
        )
    procs += [CeleryProc(env), CeleryProc(env, kind="courier", concurrency=4)]
    body = body_of({"type": "fraud.alert", "account": "acct-9"})
    assert web.request("POST", src.path, body, hmac_headers("s3cret", body, "fw"))[0] == 202
    wait_for(lambda: states(engine) == [("delivered", 1)], 60, "the delivery")
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT e.state, e.body, t.name FROM events e JOIN tenants t ON t.id = e.tenant_id"
                " ORDER BY e.id"
            )
        ).fetchall()
        delivered_id = conn.execute(text("SELECT public_id FROM deliveries")).scalar_one()
    assert [r.name for r in rows] == [src.tenant, "receiver"]
    forwarded = rows[1]
    assert b'"account":"acct-9"' in bytes(forwarded.body)
    assert delivered_id.encode() in bytes(forwarded.body)


def test_courier_killed_after_200_before_commit_resends_the_same_id(
    env, procs, make_source, engine, sink
):
    src = make_source(playbook="forward", event_type_path="type")
    with engine.begin() as conn:
        estore.create_endpoint(
            conn, src.tenant, sink.script("/once", Answer(200)), callbacks.new_secret()
        )
    courier = CeleryProc(env, kind="courier", concurrency=2)
    procs += [CeleryProc(env), courier]
    first = threading.Event()

    def freeze_then_kill(req) -> None:
        if first.is_set() or req.headers.get("webhook-id") not in delivery_ids(engine):
            return  # not the first attempt of this test's delivery
        first.set()
        courier.freeze()  # every thread stopped: it cannot read the 200 or commit
        threading.Timer(0.5, os.killpg, (courier.popen.pid, signal.SIGKILL)).start()

    sink.on_request = freeze_then_kill
    web = Web(env)
    procs.append(web)
    body = body_of({"type": "fraud.alert", "account": "acct-1"})
    assert web.request("POST", src.path, body, hmac_headers("s3cret", body, "kill"))[0] == 202
    wait_for(first.is_set, 60, "the first attempt")
    courier.popen.wait(10)
    procs += [CeleryProc(env, kind="courier", concurrency=2), CeleryProc(env, kind="beat")]
    if not helpers.eventually(lambda: states(engine) == [("delivered", 2)], 60, 0.1):
        pytest.fail(
            f"no re-send in 60 s: deliveries {states(engine)}, the sink saw"
            f" {[(r.path, r.headers.get('webhook-id')) for r in sink.received]}"
        )
    got = sink.at("/once")
    assert len(got) == 2
    assert len({r.headers["webhook-id"] for r in got}) == 1  # the sink sees one distinct id
