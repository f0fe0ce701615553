"""A broker restart costs no process: worker, courier and beat reconnect and go on.

Each test has a broker of its own (a private redis-server, restarted on its port; or a
RabbitMQ vhost whose connections are all closed) under a running web, worker, courier
and beat; the events sent after the restart must complete with every process alive.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from inbox.domain import callbacks
from inbox.store.write import endpoints as estore
from tests.brokers import Broker
from tests.e2e.test_worker_processes import wait_for
from tests.helpers import body_of, events_by_state, hmac_headers
from tests.procs import CeleryProc, Web
from tests.sink import Answer, Sink

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("sink_table")]


def done(engine, n: int) -> bool:
    """n deliveries made and n events completed (a delivery may go out before its event
    commits its completion)."""
    return delivered(engine) == n and events_by_state(engine) == {"completed": n}


def delivered(engine) -> int:
    with engine.connect() as conn:
        q = text("SELECT count(*) FROM deliveries WHERE state = 'delivered'")
        return int(conn.execute(q).scalar_one())


def all_alive(*ps) -> None:
    for p in ps:
        assert p.popen.poll() is None, f"{p.name} exited:\n{p.output()[-3000:]}"


def send(web: Web, src, n: int, tag: str, **payload: object) -> None:
    for i in range(n):
        body = body_of({"type": "fraud.alert", "account": f"{tag}-{i}", **payload})
        headers = hmac_headers("s3cret", body, f"{tag}-{i}")
        assert web.request("POST", src.path, body, headers)[0] == 202


def test_processes_survive_a_broker_restart_and_keep_draining(
    database_url, broker: Broker, procs, make_source, engine
):
    env = {
        "DATABASE_URL": database_url,
        **broker.env,
        "INBOX_LEASE_SECONDS": "5",
        "INBOX_SWEEP_SECONDS": "2",
        "INBOX_ALLOW_PRIVATE_TARGETS": "1",
    }
    sink = Sink()
    try:
        src = make_source(playbook="forward", event_type_path="type")
        with engine.begin() as conn:
            estore.create_endpoint(
                conn, src.tenant, sink.script("/hook", Answer(200)), callbacks.new_secret()
            )
        web = Web(env)
        worker = CeleryProc(env, concurrency=2)
        courier = CeleryProc(env, kind="courier", concurrency=4)
        beat = CeleryProc(env, kind="beat")
        procs += [web, worker, courier, beat]
        send(web, src, 10, "before")
        wait_for(lambda: done(engine, 10), 60, "10 deliveries before the restart")

        # Deliveries in flight (the endpoint is slow): the courier holds unacknowledged
        # messages when the broker goes away, the case that used to kill it.
        sink.script("/hook", Answer(200, delay=3.0))
        send(web, src, 5, "inflight")
        wait_for(lambda: len(sink.at("/hook")) > 10, 60, "a delivery in flight")
        broker.restart()
        sink.script("/hook", Answer(200))
        broker.restart()  # twice: the reconnect itself must leave a process that survives
        send(web, src, 5, "after")
        alive = (web, worker, courier, beat)
        wait_for(lambda: all_alive(*alive) or done(engine, 20), 90, "10 more after the restarts")
        assert events_by_state(engine) == {"completed": 20}

        broker.flush()  # every message, binding and doorbell flag gone at once
        send(web, src, 10, "flushed")
        wait_for(lambda: all_alive(*alive) or done(engine, 30), 90, "10 more after a flush")
        assert events_by_state(engine) == {"completed": 30}
        # ...and after a while with the broker back, every process is still there
        all_alive(*alive)
        for p in (worker, courier, beat):
            assert "Unrecoverable error" not in p.output(), p.output()[-3000:]
    finally:
        sink.close()
