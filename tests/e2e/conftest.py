from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.brokers import Broker, PrivateRedis, RabbitVhost, rabbit_available
from tests.procs import CeleryProc, Web


def _web_env(database_url: str) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "INBOX_DB_POOL_SIZE": "10"}


@pytest.fixture
def web_env(database_url: str) -> dict[str, str]:
    return _web_env(database_url)


@pytest.fixture(scope="module")
def web_server(database_url: str) -> Iterator[Web]:
    """One web process for the tests of a module that only send to it: each test makes
    sources of its own (their names are new, so the route cache has nothing of an earlier
    test's), and the tables are emptied between tests; a test that restarts, kills or
    configures the server starts its own (``Web(web_env, ...)``). Two worker processes, so
    copies sent at once race across processes as they do in production."""
    server = Web(_web_env(database_url), workers=2)
    yield server
    server.stop()


@pytest.fixture
def procs() -> Iterator[list]:
    """Processes a test starts; killed at its end (celery hard, the web server gently)."""
    started: list = []
    yield started
    for p in started:
        p.stop(signal.SIGKILL if isinstance(p, CeleryProc) else signal.SIGTERM)


@pytest.fixture
def private_redis(tmp_path) -> Iterator[PrivateRedis]:
    """A redis-server of this test's own, free to restart or flush."""
    server = PrivateRedis(tmp_path / "redis")
    yield server
    server.stop()


@pytest.fixture(params=["redis", "amqp"])
def broker_kind(request: pytest.FixtureRequest) -> str:
    """Each process test that takes this runs once with Redis, once with RabbitMQ."""
    if request.param == "amqp" and not rabbit_available():
        pytest.skip("no RabbitMQ (and rabbitmqctl) on this machine")
    kind: str = request.param
    return kind


@pytest.fixture(scope="session")
def rabbit_vhost() -> Iterator[RabbitVhost]:
    """This run's own RabbitMQ vhost (made on first use, deleted at the end of the run)."""
    vhost = RabbitVhost()
    yield vhost
    vhost.delete()


@pytest.fixture
def broker(broker_kind: str, private_redis: PrivateRedis, request) -> Broker:
    """REDIS_URL (the doorbell flag) is always a private Redis; BROKER_URL is that Redis
    too, or this run's RabbitMQ vhost, its queues emptied for each test."""
    r = private_redis
    if broker_kind == "redis":
        return Broker("redis", r.url, r.url, r.restart, r.flush)
    vhost: RabbitVhost = request.getfixturevalue("rabbit_vhost")
    vhost.purge()  # nothing left over from the previous test
    return Broker("amqp", r.url, vhost.url, vhost.cut, vhost.purge)
