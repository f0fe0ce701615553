"""Redis with Sentinel: the master's node is lost under load, and nothing notices but Redis.

A private stack (``tests.sentinels``: a master, a replica, three Sentinels on free ports)
is the doorbell, the rate limiter's store, the beat lease and the broker, all named by one
``sentinel://`` URL. Under a steady signed load, the master is killed and never comes
back; the Sentinels promote the replica. Every event answered 2xx completes, each effect
once; the answers are 2xx, 429 or 503, never 500; every process lives; and the new master
hears the doorbell, the rate limiter and the beat lease (its MONITOR stream).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime

import pytest
import redis

from tests.e2e.test_worker_processes import wait_for
from tests.helpers import body_of, hmac_headers, sink_rows, states_of, stop_and_settle
from tests.procs import CeleryProc, Web
from tests.sentinels import SentinelStack, available

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("sink_table")]

# What a web process logs when the limiter's Redis failed or was slow (inbox/infra/ratelimit.py).
FALLBACK = "rate limit: Redis unavailable"


def last_fallback(web: Web) -> float:
    """When a process of ``web`` last fell back to buckets of its own (epoch seconds), or 0."""
    return max(
        (
            datetime.fromisoformat(json.loads(line)["ts"]).timestamp()
            for line in web.output().splitlines()
            if FALLBACK in line
        ),
        default=0.0,
    )


@pytest.fixture
def stack(tmp_path) -> Iterator[SentinelStack]:
    why = available()
    if why is not None:
        pytest.skip(why)
    s = SentinelStack(tmp_path / "sentinel")
    yield s
    s.stop()


class Heard:
    """The commands one Redis server receives (MONITOR), from a thread of its own; it
    watches again when its connection is cut (a Sentinel cuts every client of a replica it
    promotes), until ``stop``."""

    def __init__(self, client: redis.Redis) -> None:
        self.commands: list[str] = []
        self._client = client
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self._client.monitor() as m:
                    while not self._stop.is_set():
                        self.commands.append(m.next_command()["command"])
            except (redis.RedisError, OSError, ValueError):
                self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()

    def saw(self, *words: str) -> bool:
        return any(all(w in c for w in words) for c in list(self.commands))


def post(web: Web, path: str, key: str, payload: dict) -> int:
    body = body_of(payload)
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers=hmac_headers("s3cret", body, key))
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def test_losing_the_redis_master_loses_and_doubles_nothing(
    request, database_url, stack: SentinelStack, procs, make_source, engine
):
    env = {
        "DATABASE_URL": database_url,
        "REDIS_URL": stack.url,
        "BROKER_URL": stack.url,
        "INBOX_PLAYBOOKS": "tests.sink_playbooks",
        "INBOX_SWEEP_SECONDS": "2",
        "INBOX_LEASE_SECONDS": "5",
    }
    busy = make_source(event_type_path="type", rate_limit_per_second=10_000)
    limited = make_source(event_type_path="type", rate_limit_per_second=0.01, rate_limit_burst=1)
    web = Web(env, workers=2)
    worker = CeleryProc(env, concurrency=2)
    beats = [CeleryProc(env, kind="beat"), CeleryProc(env, kind="beat")]
    procs += [web, worker, *beats]
    new_master = Heard(stack.client(stack.replica_port))
    # Its thread retries with redis-py's jittered backoff (the random module): it must not
    # outlive a failed run and disturb the next test in this process.
    request.addfinalizer(new_master.stop)

    answers: list[tuple[str, int]] = []
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            key = f"load-{i}"
            answers.append((key, post(web, busy.path, key, {"type": "flaky", "n": i})))
            i += 1

    loader = threading.Thread(target=load)
    loader.start()
    try:
        wait_for(lambda: sum(s == 202 for _, s in answers) >= 30, 60, "a steady load")
        stack.kill_master()
        promoted_at, before = time.monotonic(), len(answers)
        # The load goes on; every per-process fallback (5 s after a Redis error) has ended.
        wait_for(
            lambda: (
                time.monotonic() > promoted_at + 6
                and sum(s == 202 for _, s in answers[before:]) >= 30
            ),
            90,
            "the load after the promotion",
        )
    finally:
        stop.set()
        loader.join(60)

    # The rate limit holds across both web processes: one bucket, on the new master. A
    # script call slower than the limiter's 50 ms (a loaded machine, the busy source's too)
    # falls back to buckets per process for 5 s, by design, and says so in the log: a round
    # starts once no process is in that fallback, and one that fell back proves nothing
    # about the shared bucket, so it is sent again with a fresh source (a bucket of its own).
    limited_ids, limited_accepted = [limited.id], 0
    for _ in range(5):
        wait_for(lambda: time.time() > last_fallback(web) + 6, 30, "the fallback to end")
        began = time.time()
        limited_answers = [post(web, limited.path, f"lim-{i}", {"type": "flaky"}) for i in range(6)]
        limited_accepted += limited_answers.count(202)
        if last_fallback(web) < began:
            break
        limited = make_source(
            event_type_path="type", rate_limit_per_second=0.01, rate_limit_burst=1
        )
        limited_ids.append(limited.id)
    else:
        pytest.fail("every round of the limited source fell back to buckets per process")
    assert sorted(limited_answers) == [202, 429, 429, 429, 429, 429], limited_answers

    accepted = {key for key, status in answers if status == 202}
    statuses = Counter(status for _, status in answers)
    assert set(statuses) <= {202, 503}, statuses  # never a 500
    wait_for(
        lambda: (
            states_of(engine, busy.id, *limited_ids)
            == {"completed": len(accepted) + limited_accepted}
        ),
        120,
        "every accepted event",
    )
    rows = sink_rows(engine)
    per_event = Counter(r.event for r in rows)
    assert len(per_event) == len(accepted) + limited_accepted and set(per_event.values()) == {1}

    # The new master heard the doorbell, the rate limiter and the beat lease.
    wait_for(lambda: new_master.saw("inbox:beat:leader"), 60, "the beat lease on the new master")
    assert new_master.saw("SET", "inbox:doorbell")
    assert new_master.saw(f"inbox:rate:{limited.id}")
    leader = stack.client(stack.replica_port).get("inbox:beat:leader")
    assert leader is not None
    new_master.stop()
    for p in (web, worker, *beats):
        assert p.popen.poll() is None, f"{p.name} exited:\n{p.output()[-3000:]}"
        assert "Unrecoverable error" not in p.output(), p.output()[-3000:]
    stop_and_settle(procs, engine)
