"""RabbitMQ quorum queues (``INBOX_BROKER_QUEUES=quorum``) with real processes.

In a vhost of this test's own (made and deleted with ``rabbitmqctl``): both queues are
declared quorum queues, a real worker drains events through them, and a retry's alarm (a
countdown, which Celery sends through RabbitMQ's native delayed delivery with quorum
queues) still rings: every event completes, each effect once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from tests.brokers import PrivateRedis, RabbitVhost, rabbit_available, rabbitmqctl
from tests.e2e.test_worker_processes import wait_for
from tests.helpers import body_of, hmac_headers, sink_rows, states_of, stop_and_settle
from tests.procs import CeleryProc, Web

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("sink_table")]


@pytest.fixture
def vhost() -> Iterator[RabbitVhost]:
    if not rabbit_available():
        pytest.skip("no RabbitMQ (and rabbitmqctl) on this machine")
    v = RabbitVhost()
    yield v
    v.delete()


def queue_types(vhost: RabbitVhost) -> dict[str, str]:
    out = rabbitmqctl("list_queues", "-p", vhost.name, "--no-table-headers", "name", "type")
    return dict(line.split() for line in out.splitlines() if line.strip())


def test_a_worker_drains_quorum_queues(database_url, vhost, private_redis: PrivateRedis,
                                       procs, make_source, engine):  # fmt: skip
    env = {
        "DATABASE_URL": database_url,
        "REDIS_URL": private_redis.url,
        "BROKER_URL": vhost.url,
        "INBOX_BROKER_QUEUES": "quorum",
        "INBOX_PLAYBOOKS": "tests.sink_playbooks",
        # No sweep for an hour: only the doorbell and the alarms move events here.
        "INBOX_SWEEP_SECONDS": "3600",
        "INBOX_RETRY_BASE_SECONDS": "1",
    }
    src = make_source(event_type_path="type")
    procs.append(CeleryProc(env, concurrency=2))
    web = Web(env)
    procs.append(web)
    wait_for(lambda: {"inbox"} <= set(queue_types(vhost)), 60, "the worker's queue")
    for i in range(20):
        body = body_of({"type": "flaky", "n": i})
        assert web.request("POST", src.path, body, hmac_headers("s3cret", body, f"q{i}"))[0] == 202
    # One event fails once: its retry is rung by an alarm, a countdown message.
    body = body_of({"type": "two.step", "fail_notify_times": 1})
    assert web.request("POST", src.path, body, hmac_headers("s3cret", body, "retry"))[0] == 202
    wait_for(lambda: states_of(engine, src.id) == {"completed": 21}, 180, "every event")
    rows = sink_rows(engine)
    per_step = Counter((r.event, r.step, r.step_key) for r in rows)
    assert sum(1 for r in rows if r.step == "work") == 20
    assert [k for k, n in per_step.items() if n > 1 and k[1] != "notify"] == []
    assert sum(1 for r in rows if r.step == "notify") == 2  # failed once, then done
    assert sum(1 for r in rows if r.step == "charge") == 1  # never run again
    types = queue_types(vhost)
    assert types["inbox"] == types["deliveries"] == "quorum", types
    logs = "".join(p.output() for p in procs)
    stop_and_settle(procs, engine)
    for bad in ("PRECONDITION_FAILED", "NOT_IMPLEMENTED", "delayed delivery", "alarm"):
        assert bad not in logs, logs[-3000:]
