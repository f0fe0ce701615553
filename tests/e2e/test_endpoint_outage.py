"""An endpoint outage with real courier, worker and beat processes and a real sink: a 503
window, a 410, timeouts, and a courier killed while the circuit is half open. Deliveries are
counted by webhook-id at the sink (what the receiver sees), never by status codes.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections import Counter
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
from tests.sink import Answer

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


def test_an_ordered_endpoint_is_delivered_in_order_across_two_courier_processes(
    env, procs, make_source, engine, sink
):
    src = make_source()
    # Every answer takes 50 ms (two in flight would overlap); every seventh is a 503, so
    # retries come in between and must still keep the order.
    script = [Answer(503 if i % 7 == 3 else 200, delay=0.05) for i in range(80)]
    url = sink.script("/ord", *script, Answer(200, delay=0.05))
    with engine.begin() as conn:
        estore.create_endpoint(
            conn,
            src.tenant,
            url,
            callbacks.new_secret(),
            ordered=True,
            max_in_flight=4,
            retry_schedule=[1],
            max_attempts=10,
        )
    ids = enqueue(engine, src, 30)
    procs += [
        CeleryProc(env),
        CeleryProc(env, kind="courier", concurrency=2),
        CeleryProc(env, kind="courier", concurrency=2),
        CeleryProc(env, kind="beat"),
    ]
    wait_for(
        lambda: one(engine, "SELECT count(*) FROM deliveries WHERE state = 'delivered'")[0] == 30,
        120,
        "every ordered callback",
    )
    got = sink.at("/ord")
    answered = [
        (r.headers["webhook-id"], (script[i].status if i < len(script) else 200))
        for i, r in enumerate(got)
    ]
    # Delivered (2xx) each once, in the order made; first arrivals in that order as well.
    assert [w for w, status in answered if status == 200] == ids
    assert list(dict.fromkeys(w for w, _ in answered)) == ids
    # One in flight: a request never arrives before the previous one's answer was due.
    assert all(b.at - a.at >= 0.045 for a, b in itertools.pairwise(got))
    assert sum(1 for _, status in answered if status == 503) >= 4  # retries did happen


def test_a_slow_endpoint_gets_each_callback_once_and_does_not_hold_up_others(
    env, procs, make_source, engine, sink
):
    slow_src, fast_src = make_source(), make_source()
    with engine.begin() as conn:
        slow = estore.create_endpoint(  # answers in 2 s, under its 3 s timeout
            conn,
            slow_src.tenant,
            sink.script("/slow", Answer(200, delay=2)),
            callbacks.new_secret(),
            timeout_ms=3000,
        )
        estore.create_endpoint(conn, fast_src.tenant, sink.script("/fast"), callbacks.new_secret())
    slow_ids = enqueue(engine, slow_src, 12)
    procs += [
        CeleryProc(env),
        CeleryProc(env, kind="courier", concurrency=4),
        CeleryProc(env, kind="courier", concurrency=4),
        CeleryProc(env, kind="beat"),
    ]
    wait_for(lambda: len(sink.at("/slow")) >= 4, 60, "the slow endpoint to be busy")
    fast_ids = enqueue(engine, fast_src, 20, "fast")
    made = time.monotonic()
    wait_for(lambda: len(sink.at("/fast")) >= 20, 60, "the other endpoint's callbacks")
    # The bound: the beat's sweep rings each second; a courier thread is never held by the
    # slow endpoint beyond its max_in_flight (4 of 8), so the others go within 10 s.
    assert sink.at("/fast")[-1].at - made <= 10.0
    wait_for(
        lambda: (
            one(
                engine,
                "SELECT count(*) FROM deliveries WHERE state = 'delivered' AND endpoint_id = :e",
                e=slow.id,
            )[0]
            == 12
        ),
        120,
        "the slow endpoint's callbacks",
    )
    assert Counter(r.headers["webhook-id"] for r in sink.at("/slow")) == Counter(slow_ids)
    assert Counter(r.headers["webhook-id"] for r in sink.at("/fast")) == Counter(fast_ids)
    breaker = one(
        engine,
        "SELECT circuit, circuit_changed_at, circuit_window FROM endpoints WHERE id = :e",
        e=slow.id,
    )
    assert tuple(breaker) == ("closed", None, {})  # never opened, no failure counted
    failed = one(
        engine,
        "SELECT count(*) FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id"
        " WHERE d.endpoint_id = :e AND (a.status IS NULL OR a.status <> 200)",
        e=slow.id,
    )[0]
    assert failed == 0  # not one timeout: every attempt was answered 200
