"""Alarms (delayed doorbells) against real Redis and PostgreSQL."""

from __future__ import annotations

import time

import pytest
import redis

import tests.sink_playbooks  # noqa: F401  (registers the test playbooks)
from inbox.infra import broker
from inbox.infra.config import Settings
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.reads import queue as queue_reads
from tests.helpers import body_of, hmac_headers

pytestmark = pytest.mark.usefixtures("sink_table")


@pytest.fixture
def sent(redis_url: str) -> list[tuple[str, list[int], float]]:
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(broker.ALARM + "*"):
        client.delete(key)
    return []


def alarms(redis_url: str, sent: list, horizon: float = 60.0) -> broker.Alarms:
    return broker.Alarms(redis_url, horizon, lambda *a: sent.append(a))


def test_alarms_in_one_slot_share_one_message_and_are_never_early(redis_url, sent):
    a = alarms(redis_url, sent)
    t0 = time.time()
    a.clock = lambda: t0 + 0.01  # a slow machine must not cross a slot boundary mid-test
    for _ in range(100):
        a.set(broker.DRAIN, [], 5.0)
    assert len(sent) == 1
    task, args, countdown = sent[0]
    assert (task, args) == (broker.DRAIN, [])
    assert countdown >= 5.0 - 1e-6  # rounded up to its slot, never down
    assert countdown <= 5.0 + broker.ALARM_SLOT
    a.set(broker.DELIVER, [7], 5.0)  # another task (or endpoint) has alarms of its own
    a.set(broker.DRAIN, [], 9.0)  # another slot
    assert [(s[0], s[1]) for s in sent[1:]] == [(broker.DELIVER, [7]), (broker.DRAIN, [])]


def test_a_retry_beyond_the_horizon_waits_for_a_later_sweep(redis_url, sent):
    assert not alarms(redis_url, sent, horizon=65).set(broker.DRAIN, [], 66.0)
    assert sent == []
    assert broker.alarm_horizon(30) == 65.0
    assert broker.alarm_horizon(3600) == broker.ALARM_MAX_AHEAD


def test_a_drain_reports_each_retry_and_the_sweep_finds_it(client, make_source, engine):
    src = make_source(event_type_path="type")
    body = body_of({"type": "retry.later", "fail_times": 1})
    assert client.post(src.path, data=body, headers=hmac_headers("s3cret", body)).status_code == 202
    s = Settings(database_url="x", retry_base_seconds=10.0)
    result = drain_once(Runtime(s, engine))
    assert result.states == {"received": 1}
    (delay,) = result.retry_in
    assert 5.0 <= delay <= 10.0  # the first retry: half fixed, half jitter
    with engine.connect() as conn:
        (due,) = queue_reads.due_within(conn, 60.0, broker.ALARM_SLOT)
        assert queue_reads.due_within(conn, 1.0, broker.ALARM_SLOT) == []
    assert delay - 0.5 <= due <= delay + broker.ALARM_SLOT
