"""An endpoint outage with real courier, worker and beat processes and a real sink: a 503
window, a 410, timeouts, and a courier killed while the circuit is half open. Deliveries are
counted by webhook-id at the sink (what the receiver sees), never by status codes.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from inbox.domain import callbacks
from inbox.domain.callbacks import CallbackSet, Outgoing
from inbox.store.write import endpoints as estore
from inbox.store.write import intents
from tests.brokers import Broker, PrivateRedis
from tests.e2e.test_worker_processes import wait_for
from tests.procs import CeleryProc
from tests.sink import Answer, Sink

pytestmark = pytest.mark.e2e

THRESHOLD = 3  # the default: below the default attempt budget, 4


@pytest.fixture
def env(database_url: str, private_redis: PrivateRedis) -> dict[str, str]:
    r = private_redis
    return {
        "DATABASE_URL": database_url,
        **Broker("redis", r.url, r.url, r.restart, r.flush).env,
        "INBOX_LEASE_SECONDS": "3",
        "INBOX_SWEEP_SECONDS": "1",
        "INBOX_ALLOW_PRIVATE_TARGETS": "1",
        "INBOX_CIRCUIT_FAILURES": str(THRESHOLD),
        "INBOX_CIRCUIT_PROBE_MAX_SECONDS": "2",
    }


@pytest.fixture
def sink() -> Iterator[Sink]:
    s = Sink()
    yield s
    s.close()


def enqueue(engine, src, count: int, step: str = "s") -> list[str]:
    """``count`` callbacks of one step; the new webhook-ids in the order they were made."""
    now = datetime.now(UTC)
    messages = [Outgoing("order.paid", {"n": i}, now) for i in range(count)]
    with engine.begin() as conn:
        before = conn.execute(text("SELECT coalesce(max(id), 0) FROM deliveries")).scalar_one()
        intents.enqueue(
            conn, [CallbackSet(src.tenant_id, src.tenant, None, f"evt_{step}", step, messages)]
        )
        return list(
            conn.execute(
                text("SELECT public_id FROM deliveries WHERE id > :b ORDER BY id"), {"b": before}
            ).scalars()
        )


def one(engine, sql: str, **params):
    with engine.connect() as conn:
        return conn.execute(text(sql), params).one()


def test_a_503_window_costs_probes_then_every_callback_arrives_once_in_order(
    env, procs, make_source, engine, sink
):
    src = make_source()
    url = sink.script("/ep", Answer(503))
    with engine.begin() as conn:
        ep = estore.create_endpoint(conn, src.tenant, url, callbacks.new_secret(), max_attempts=3)
    ids = enqueue(engine, src, 100)
    procs += [  # the beat's sweep runs on a worker and rings the courier
        CeleryProc(env),
        CeleryProc(env, kind="courier", concurrency=4),
        CeleryProc(env, kind="beat"),
    ]

    def circuit() -> str:
        return str(one(engine, "SELECT circuit FROM endpoints WHERE id = :e", e=ep.id)[0])

    wait_for(lambda: circuit() != "closed", 60, "the circuit to open")

    def probing() -> bool:
        last = sink.at("/ep")[-4:]
        return len(last) == 4 and len({r.headers["webhook-id"] for r in last}) == 1

    # The rounds in flight when it opened stop at the threshold; then one probe at a time,
    # the oldest delivery each time, most of a second or more apart.
    wait_for(probing, 60, "four probes in a row")
    during = sink.at("/ep")
    assert all(b.at - a.at >= 0.7 for a, b in itertools.pairwise(during[-4:]))
    # Not one attempt per message: each in-flight slot's round stopped at the threshold.
    assert len({r.headers["webhook-id"] for r in during}) <= 4 * THRESHOLD
    assert len(during) < len(ids)  # without a breaker each message is tried at least once
    failed = one(engine, "SELECT count(*) FROM deliveries WHERE state = 'failed'")[0]
    assert failed == 0  # more probes than max_attempts=3: no budget was spent

    sink.script("/ep", Answer(200))  # the endpoint is back
    switched = len(sink.at("/ep"))
    wait_for(
        lambda: one(engine, "SELECT count(*) FROM deliveries WHERE state = 'delivered'")[0] == 100,
        90,
        "the backlog",
    )
    after = [r.headers["webhook-id"] for r in sink.at("/ep")[switched:]]
    assert Counter(after) == Counter(ids)  # every webhook-id once after the recovery
    assert one(engine, "SELECT circuit FROM endpoints WHERE id = :e", e=ep.id)[0] == "closed"


def test_after_a_410_callbacks_are_held_and_enable_sends_each_once(
    env, procs, make_source, engine, sink
):
    src = make_source()
    url = sink.script("/gone", Answer(410))
    with engine.begin() as conn:
        ep = estore.create_endpoint(conn, src.tenant, url, callbacks.new_secret(), max_in_flight=1)
    [first] = enqueue(engine, src, 1, "first")
    procs += [CeleryProc(env), CeleryProc(env, kind="courier", concurrency=2)]
    procs.append(CeleryProc(env, kind="beat"))
    wait_for(
        lambda: not one(engine, "SELECT enabled FROM endpoints WHERE id = :e", e=ep.id)[0],
        60,
        "the 410",
    )
    held = enqueue(engine, src, 20, "during")
    counts = one(
        engine,
        "SELECT count(*) FILTER (WHERE state = 'held'), count(*) FROM deliveries"
        " WHERE endpoint_id = :e",
        e=ep.id,
    )
    assert tuple(counts) == (20, 21)
    sink.script("/gone", Answer(200))
    got = CliRunner().invoke(main, ["endpoints", "enable", ep.public_id, "--actor", "ops"])
    assert got.exit_code == 0 and "20 held deliveries released" in got.output
    wait_for(
        lambda: one(engine, "SELECT count(*) FROM deliveries WHERE state = 'delivered'")[0] == 20,
        60,
        "the held callbacks",
    )
    received = [r.headers["webhook-id"] for r in sink.at("/gone")]
    assert received == [first, *held]  # once each, in order, after the one that got the 410


def test_a_courier_killed_while_half_open_leaves_one_probe_and_no_double_delivery(
    env, procs, make_source, engine, sink
):
    src = make_source()
    url = sink.script("/slow", Answer(200, delay=3))  # times out: the circuit opens
    with engine.begin() as conn:
        ep = estore.create_endpoint(
            conn,
            src.tenant,
            url,
            callbacks.new_secret(),
            timeout_ms=300,
            retry_schedule=[1],
        )
    ids = enqueue(engine, src, 12)
    courier = CeleryProc(env, kind="courier", concurrency=2)
    procs += [CeleryProc(env), courier, CeleryProc(env, kind="beat")]
    killed = threading.Event()

    def kill_at_the_first_probe(_req) -> None:
        if killed.is_set():
            return
        if one(engine, "SELECT circuit FROM endpoints WHERE id = :e", e=ep.id)[0] == "half_open":
            killed.set()
            os.killpg(courier.popen.pid, signal.SIGKILL)  # mid-probe: it never learns

    sink.on_request = kill_at_the_first_probe
    wait_for(killed.is_set, 90, "a probe")
    courier.popen.wait(10)
    sink.on_request = None
    sink.script("/slow", Answer(200))  # fast again
    switched = len(sink.at("/slow"))
    procs.append(CeleryProc(env, kind="courier", concurrency=2))
    wait_for(
        lambda: one(engine, "SELECT count(*) FROM deliveries WHERE state = 'delivered'")[0] == 12,
        90,
        "every callback",
    )
    answered = Counter(r.headers["webhook-id"] for r in sink.at("/slow")[switched:])
    assert answered == Counter(ids)  # each answered 2xx once: the killed probe was not doubled
    failed = one(engine, "SELECT count(*) FROM deliveries WHERE state = 'failed'")[0]
    assert failed == 0
