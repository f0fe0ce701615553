"""Stale events across real processes: out-of-order pairs posted together to the web server,
judged by three celery worker processes; the later decision is always the last effect."""

from __future__ import annotations

import threading

import pytest
import redis
from sqlalchemy import text

from tests.e2e.test_worker_processes import wait_for
from tests.helpers import body_of, events_by_state, hmac_headers, sink_rows
from tests.procs import CeleryProc, Web

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("sink_table")]

T1, T2 = "2026-11-30T09:00:00Z", "2026-11-30T17:30:00Z"


@pytest.fixture
def env(database_url: str, redis_url: str) -> dict[str, str]:
    redis.Redis.from_url(redis_url).flushdb()
    return {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "INBOX_PLAYBOOKS": "tests.sink_playbooks",
        "INBOX_SWEEP_SECONDS": "1",
        "INBOX_BATCH_SIZE": "1",  # each worker claims one event: a real race
    }


def test_out_of_order_pairs_across_worker_processes(env, procs, make_source, engine):
    src = make_source(
        playbook="review", business_key_paths=["case"], occurred_at_path="occurred_at"
    )
    web = Web(env)
    procs.append(web)
    for _ in range(3):
        procs.append(CeleryProc(env))
    procs.append(CeleryProc(env, kind="beat"))
    deliveries = []
    for i in range(4):
        case = f"case-{i}"
        older = {"case": case, "occurred_at": T1, "decision": "close", "sleep": 0.5}
        newer = {"case": case, "occurred_at": T2, "decision": "approve"}
        deliveries += [(f"{case}-o", older), (f"{case}-n", newer)]
    barrier = threading.Barrier(len(deliveries))
    ids: dict[str, str] = {}

    def post(key: str, payload: dict) -> None:
        body = body_of(payload)
        barrier.wait()
        status, _, answer = web.request("POST", src.path, body, hmac_headers("s3cret", body, key))
        assert status == 202
        ids[key] = answer.decode().split('"id":"')[1].split('"')[0]

    threads = [threading.Thread(target=post, args=d) for d in deliveries]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(ids) == len(deliveries)
    wait_for(lambda: events_by_state(engine) == {"completed": 8}, 120, "every event to finish")
    rows = sink_rows(engine)
    with engine.connect() as conn:
        outcome = dict(conn.execute(text("SELECT public_id, outcome FROM events")).all())
    for i in range(4):
        older, newer = ids[f"case-{i}-o"], ids[f"case-{i}-n"]
        effects = [r.event for r in rows if r.event in (older, newer)]
        assert effects[-1] == newer and effects.count(newer) == 1, (i, effects)
        assert outcome[newer] == "completed"
        assert outcome[older] == ("completed" if older in effects else "stale"), (i, effects)
