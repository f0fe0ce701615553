"""The Celery tasks' wiring, with an in-process worker on the real Redis broker.

(celery.contrib.testing runs a worker thread without Docker; the crash paths use real
`celery worker` subprocesses in tests/e2e.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis
from celery.contrib.testing.worker import start_worker
from sqlalchemy import text

from inbox.infra.config import Settings
from tests.helpers import body_of, events_by_state, hmac_headers, leases_expired, wait_for


@pytest.fixture
def celery_env(monkeypatch, database_url: str, redis_url: str, engine) -> Iterator[object]:
    from celery.signals import worker_process_init

    from workers import state, tasks
    from workers.app import _fresh_engine, app

    # The forked-child hook would discard the test's shared engine: this worker is a thread.
    worker_process_init.disconnect(_fresh_engine)

    redis.Redis.from_url(redis_url).flushdb()
    live = Settings(
        database_url=database_url, redis_url=redis_url, broker_url=redis_url, lease_seconds=30
    )
    state.use(state.WorkerState(live, app, engine_=engine))
    app.conf.broker_url = redis_url
    app.conf.task_queues = None
    with start_worker(app, pool="solo", perform_ping_check=False, queues=["inbox", "deliveries"]):
        yield tasks
    app.conf.broker_url = None
    state.use(None)
    worker_process_init.connect(_fresh_engine)


def wait(cond, timeout: float = 60) -> None:
    wait_for(cond, timeout)


def send_and_drain(celery_env, client, make_source, engine, n: int) -> None:
    """``n`` signed events to a new source, one drain task rung, all of them completed."""
    src = make_source()
    for i in range(n):
        body = body_of({"n": i})
        client.post(src.path, data=body, headers=hmac_headers("s3cret", body, f"k{i}"))
    celery_env.drain.delay()
    wait(lambda: events_by_state(engine) == {"completed": n})


def test_the_drain_task_runs_what_the_doorbell_rang_for(
    celery_env, client, make_source, engine, redis_url
):
    from inbox.infra.broker import FLAG

    send_and_drain(celery_env, client, make_source, engine, 3)
    # The drain holds the flag while it finds events, and lets it go when it ends: a
    # flag left behind would hold back every ring for its TTL.
    wait(lambda: redis.Redis.from_url(redis_url).get(FLAG) is None)


def test_a_drain_that_finds_events_holds_the_doorbell_for_the_next_ones(
    celery_env, client, make_source, engine, redis_url, monkeypatch
):
    """Events that arrive while a drain runs are claimed by it: their rings send no task
    (one task a stream, not one a ring), and the task ends with the flag let go."""
    from dataclasses import replace

    from celery.signals import task_prerun

    from inbox.infra.broker import FLAG, make_doorbell
    from workers import state

    # The drain waits this long after a claim that found events: long beside the test's
    # steps, so the second event surely arrives while the first's drain still runs.
    current = state.current()
    monkeypatch.setattr(current, "settings", replace(current.settings, drain_linger_ms=1000))
    runs: list[str] = []

    def counted(sender=None, **_: object) -> None:
        if sender is not None and sender.name == "inbox.drain":
            runs.append(sender.name)

    task_prerun.connect(counted, weak=False)
    try:
        ring = make_doorbell(redis_url, lambda: celery_env.drain.delay())
        src = make_source()
        for i in range(2):
            body = body_of({"n": i})
            client.post(src.path, data=body, headers=hmac_headers("s3cret", body, f"h{i}"))
            ring()
            wait(lambda i=i: events_by_state(engine) == {"completed": i + 1})
        assert runs == ["inbox.drain"]  # the second ring found the flag held
        wait(lambda: redis.Redis.from_url(redis_url).get(FLAG) is None)
        ring()  # after the drain let go, a ring sends a task again
        wait(lambda: len(runs) == 2)
    finally:
        task_prerun.disconnect(counted)


def test_the_sweep_task_requeues_an_expired_lease_and_rings(celery_env, make_source, engine):
    from inbox.store.write import queue

    src = make_source()
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO events (public_id, tenant_id, source_id, content_type, body,"
                " body_sha256, response_status, response_body)"
                " VALUES ('evt_x', :t, :s, 'application/json', '{}', '\\x00', 202, '')"
            ),
            {"t": src.tenant_id, "s": src.id},
        )
        [claim] = queue.claim(conn, "a-dead-worker", 10, 0.05)
    wait_for(lambda: leases_expired(engine))
    result = celery_env.sweep.delay()
    wait(lambda: events_by_state(engine) == {"completed": 1})
    assert claim.fence == 1
    with engine.connect() as conn:
        assert conn.execute(text("SELECT fence, attempts FROM events")).one() == (2, 2)
    assert result.id


def _drain_backlog(
    celery_env, client, make_source, engine, monkeypatch, ahead_of: Callable[[int], float]
) -> list[tuple[bool, bool]]:
    """A backlog of 23 events drained by tasks in batches of 5, the task's clock ahead of
    the real one by ``ahead_of(batches run so far)`` seconds; for each drain_once the tasks
    ran, whether it was handed a batch claimed ahead and whether it might claim one."""
    from dataclasses import replace

    from workers import state, tasks

    current = state.current()
    monkeypatch.setattr(current, "settings", replace(current.settings, batch_size=5))
    calls: list[tuple[bool, bool]] = []
    drain_once = tasks.drain_once

    def counted(*args, **kwargs):
        calls.append((kwargs["claimed"] is not None, kwargs["prefetch"] is not None))
        return drain_once(*args, **kwargs)

    class Clock:
        sleep = staticmethod(time.sleep)

        @staticmethod
        def monotonic() -> float:
            return time.monotonic() + ahead_of(len(calls))

    monkeypatch.setattr(tasks, "drain_once", counted)
    monkeypatch.setattr(tasks, "time", Clock)
    send_and_drain(celery_env, client, make_source, engine, 23)
    return calls


def test_a_drain_over_a_backlog_runs_the_batch_it_claimed_ahead_before_it_ends(
    celery_env, client, make_source, engine, monkeypatch
):
    """After a quick full batch, the next full one claims the one after while it runs;
    when the task's budget runs out with a batch claimed ahead, the task runs that batch
    before it ends (no lease is left to lapse), and the next task drains the rest: every
    event once, none left claimed."""
    # The task's budget is spent once two batches have run.
    calls = _drain_backlog(
        celery_env, client, make_source, engine, monkeypatch, lambda n: 1000.0 if n >= 2 else 0.0
    )
    # The first batch claims none ahead (no batch has shown how long one takes); the
    # second, after a quick first, claims the third; the budget runs out, the third runs
    # (handed on, claiming none) in the same task, which ends; the next task claims anew.
    assert calls[:4] == [(False, False), (False, True), (True, False), (False, False)]


def test_after_a_slow_batch_a_drain_claims_nothing_ahead(
    celery_env, client, make_source, engine, monkeypatch
):
    """Batches that take longer than AHEAD_BELOW_SECONDS (by the task's clock) claim
    nothing ahead: the events stay free for another worker process."""
    # Each batch takes a second by the task's clock (still within the budget).
    calls = _drain_backlog(celery_env, client, make_source, engine, monkeypatch, lambda n: 1.0 * n)
    assert len(calls) >= 5 and not any(prefetch for _, prefetch in calls)
