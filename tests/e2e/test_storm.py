"""A retry storm across two web processes: copies of many keys at once, no 5xx.

Each process batches its concurrent claims into one INSERT (group commit). Two such
statements that take the same keys in different orders would wait on each other until
PostgreSQL's deadlock detector kills one, and every request it carried would hear 503.
"""

from __future__ import annotations

import http.client
import random
import threading
from collections import Counter

import pytest
from sqlalchemy import text

from tests.helpers import EVENTS, body_of, hmac_headers
from tests.procs import Web

pytestmark = pytest.mark.e2e

KEYS = 100
COPIES = 4  # per key, spread over both processes
ROUNDS = 6


def _storm(servers: list[Web], path: str, tag: str) -> list[tuple[str, int, bool]]:
    """Every copy of every key, each on its own connection, released by one barrier."""
    plan = []
    for k in range(KEYS):
        body = body_of({"id": f"{tag}-{k}", "pad": "x" * 200})
        for c in range(COPIES):
            plan.append((f"{tag}-{k}", body, servers[(k + c) % len(servers)]))
    random.Random(tag).shuffle(plan)
    barrier = threading.Barrier(len(plan))
    answers: list[tuple[str, int, bool] | None] = [None] * len(plan)

    def send(i: int) -> None:
        key, body, server = plan[i]
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        try:
            conn.connect()
            barrier.wait(60)
            conn.request("POST", path, body=body, headers=hmac_headers("s3cret", body, key))
            resp = conn.getresponse()
            resp.read()
            answers[i] = (key, resp.status, resp.getheader("Idempotent-Replayed") == "true")
        finally:
            conn.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(plan))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(a is not None for a in answers), "some requests got no answer"
    return [a for a in answers if a is not None]


def test_copies_of_many_keys_at_two_processes_get_one_202_each_and_no_5xx(
    web_env, make_source, engine
):
    src = make_source()
    # Small pools and many threads: each process's statements carry many rows.
    # A starved CPU is not an unavailable database: a generous deadline, so a loaded
    # machine slows the storm down instead of answering it 503.
    env = {**web_env, "INBOX_DB_POOL_SIZE": "4", "WEB_THREADS": "32"}
    env["INBOX_DB_TIMEOUT_MS"] = "15000"
    servers = [Web(env, workers=2), Web(env, workers=2)]
    try:
        answers = []
        for r in range(ROUNDS):
            answers += _storm(servers, src.path, f"round{r}")
    finally:
        logs = "".join(s.output() for s in servers)
        for s in servers:
            s.stop()
    statuses = Counter(status for _, status, _ in answers)
    assert statuses == {202: KEYS * COPIES * ROUNDS}, (statuses, logs[-3000:])
    first = Counter(key for key, _, replayed in answers if not replayed)
    assert sorted(first.values()) == [1] * (KEYS * ROUNDS)  # one first answer per key
    with engine.connect() as conn:
        rows = conn.execute(
            text(f"SELECT count(*), sum(duplicate_count) FROM ({EVENTS}) AS e")
        ).one()
    assert rows[0] == KEYS * ROUNDS
    assert rows[1] == KEYS * ROUNDS * (COPIES - 1)
    assert "DeadlockDetected" not in logs
