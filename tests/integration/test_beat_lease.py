"""The beat lease against real Redis: however many beats run, one sends the periodic tasks."""

from __future__ import annotations

import uuid

import pytest
import redis

from dev.embedded import free_port
from inbox.infra import broker
from tests.e2e.test_worker_processes import wait_for


@pytest.fixture
def key(redis_url: str):
    """A lease key of this test's own (the Redis database is shared by the run)."""
    name = f"test:beat:{uuid.uuid4().hex}"
    yield name
    redis.Redis.from_url(redis_url).delete(name)


def lease(redis_url: str, key: str, owner: str, ttl: float = 60.0) -> broker.BeatLease:
    return broker.BeatLease(redis_url, ttl, owner, key=key)


def test_one_beat_holds_the_lease_and_renews_it(redis_url, key):
    a, b = lease(redis_url, key, "host-a"), lease(redis_url, key, "host-b")
    assert a.held() and not b.held()
    client = redis.Redis.from_url(redis_url)
    client.pexpire(key, 50)  # as if most of the lease had passed
    assert a.held() and not b.held()
    assert client.pttl(key) > 50_000  # renewed to its whole length


def test_a_lapsed_lease_is_taken_by_a_standing_by_beat(redis_url, key):
    a, b = lease(redis_url, key, "host-a", ttl=0.2), lease(redis_url, key, "host-b")
    assert a.held() and not b.held()
    wait_for(b.held, 10, "the lease to lapse")  # a died: nothing renewed its lease
    assert not a.held()  # ...and a beat that comes back stands by


def test_a_released_lease_is_taken_at_once_and_only_its_holder_releases(redis_url, key):
    a, b = lease(redis_url, key, "host-a"), lease(redis_url, key, "host-b")
    assert a.held()
    b.release()  # not b's to release
    assert not b.held()
    a.release()
    assert b.held() and not a.held()


def test_the_same_beat_restarted_takes_its_lease_back(redis_url, key):
    assert lease(redis_url, key, "host-a:/var/lib/beat-schedule").held()
    again = lease(redis_url, key, "host-a:/var/lib/beat-schedule")  # a new process
    assert again.held()


def test_without_redis_every_beat_sends(key):
    down = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    assert lease(down, key, "host-a").held() and lease(down, key, "host-b").held()
    assert lease("", key, "host-a").held()  # no Redis configured (RabbitMQ alone)
