"""Real celery worker and beat processes against real PostgreSQL and Redis."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable

import pytest
import redis
from sqlalchemy import text

from inbox.infra.broker import FLAG
from tests import helpers
from tests.brokers import Broker
from tests.helpers import body_of, events_by_state, hmac_headers, insert_pending, sink_rows
from tests.procs import CeleryProc, Web
from tests.sink_playbooks import CRASH_DIR

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("sink_table")]


@pytest.fixture
def env(database_url: str, broker: Broker) -> dict[str, str]:
    """Every test here runs twice: Redis as the broker, and a RabbitMQ vhost of its own."""
    return {
        "DATABASE_URL": database_url,
        **broker.env,
        "INBOX_PLAYBOOKS": "tests.sink_playbooks",
        "INBOX_LEASE_SECONDS": "3",
        "INBOX_SWEEP_SECONDS": "1",
        "INBOX_RETRY_BASE_SECONDS": "0.05",
    }


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    helpers.wait_for(cond, timeout, what, interval=0.1)


def test_sigkill_mid_playbook_resumes_with_the_same_step_key(env, procs, make_source, engine):
    src = make_source(event_type_path="type")
    CRASH_DIR.mkdir(parents=True, exist_ok=True)
    (CRASH_DIR / "c1").touch()
    web = Web(env)
    procs.append(web)
    worker = CeleryProc(env)
    procs.append(worker)
    body = body_of({"type": "two.step", "crash": "c1"})
    status, _, _ = web.request("POST", src.path, body, hmac_headers("s3cret", body, "crash"))
    assert status == 202
    # the charge reached the outside system; the worker now hangs before its commit
    wait_for(lambda: len(sink_rows(engine)) == 1, 30, "the first charge")
    worker.stop(signal.SIGKILL)
    assert events_by_state(engine) == {"processing": 1}
    procs.append(CeleryProc(env))
    procs.append(CeleryProc(env, kind="beat"))
    wait_for(lambda: events_by_state(engine) == {"completed": 1}, 60, "completion")
    rows = sink_rows(engine)
    assert [r.step for r in rows] == ["charge", "charge", "notify"]
    assert rows[0].step_key == rows[1].step_key  # the outside system can deduplicate
    assert rows[0].pid != rows[1].pid  # ...and it was a different process that resumed
    with engine.connect() as conn:
        ev = conn.execute(text("SELECT attempts, decision FROM events")).one()
    assert ev.attempts == 2 and ev.decision == {"notified": True}


def test_broker_flushed_with_1000_pending_all_complete_after_a_sweep(
    env, procs, make_source, engine, broker
):
    src = make_source(event_type_path="type")
    insert_pending(engine, src, 1000, {"type": "flaky"})
    broker.flush()  # every doorbell message is gone
    procs.append(CeleryProc(env, concurrency=2))
    procs.append(CeleryProc(env, kind="beat"))
    wait_for(lambda: events_by_state(engine) == {"completed": 1000}, 90, "1000 completions")
    assert len(sink_rows(engine)) == 1000


@pytest.mark.parametrize("broker_kind", ["redis"])  # PostgreSQL decides this race, not the broker
def test_two_workers_race_and_each_event_is_processed_once(env, procs, make_source, engine):
    src = make_source(event_type_path="type")
    insert_pending(engine, src, 1000, {"type": "flaky"})
    for _ in range(2):
        procs.append(CeleryProc(env, concurrency=2))
    procs.append(CeleryProc(env, kind="beat"))
    wait_for(lambda: events_by_state(engine) == {"completed": 1000}, 90, "1000 completions")
    rows = sink_rows(engine)
    per_event = Counter(r.event for r in rows)
    assert len(per_event) == 1000 and set(per_event.values()) == {1}
    assert len({r.pid for r in rows}) >= 2  # more than one process really took part


def test_a_starting_worker_drains_what_a_stuck_doorbell_flag_held_back(
    env, procs, make_source, engine, broker
):
    # As after a worker was killed holding a drain message: the flag of the ring that sent
    # it is still set, the message is gone, and no sweep comes (no beat; an hour apart).
    env = {**env, "INBOX_SWEEP_SECONDS": "3600"}
    src = make_source(event_type_path="type")
    insert_pending(engine, src, 20, {"type": "flaky"})
    flag = redis.Redis.from_url(broker.redis_url)
    flag.set(FLAG, b"1", px=3_600_000)
    procs.append(CeleryProc(env, concurrency=2))
    wait_for(lambda: events_by_state(engine) == {"completed": 20}, 60, "20 completions")
    assert len(sink_rows(engine)) == 20


def test_doorbell_makes_an_event_complete_without_waiting_for_a_sweep(
    env, procs, make_source, engine
):
    env = {**env, "INBOX_SWEEP_SECONDS": "3600"}
    src = make_source(event_type_path="type")
    worker = CeleryProc(env)
    procs.append(worker)
    web = Web(env)
    procs.append(web)
    wait_for(lambda: " ready." in worker.output(), 60, "the worker")
    body = body_of({"type": "flaky"})
    started = time.monotonic()
    status, _, _ = web.request("POST", src.path, body, hmac_headers("s3cret", body, "bell"))
    assert status == 202
    wait_for(lambda: events_by_state(engine) == {"completed": 1}, 20, "completion")
    assert time.monotonic() - started < 10
