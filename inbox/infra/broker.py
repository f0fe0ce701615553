"""The broker, as every process sees it: a doorbell, never a carrier of event data.

Messages carry row ids only, and are sent by task *name*, so nothing here (nor in the web
app or the CLI) imports the worker shell. The sweeper re-rings for anything a lost message
missed, so every ring here is best effort.

The doorbell after a commit: a Redis flag (SET NX) coalesces rings, so while a drain is
pending further rings send nothing. The drain task clears the flag *before* it claims, so an
event committed before a suppressed ring is always seen by that drain's claim; one committed
after the clear rings anew. The flag expires, and the sweeper re-rings, so a lost message delays
events by at most one sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import redis
from celery import Celery

from inbox.infra.config import Settings

log = logging.getLogger(__name__)

QUEUE = "inbox"
DELIVERIES = "deliveries"
DRAIN = "inbox.drain"
DELIVER = "inbox.deliver"
SWEEP = "inbox.sweep"
PRUNE = "inbox.prune"
BULK_REPLAY = "inbox.bulk_replay"
FLAG = "inbox:doorbell"
FLAG_TTL_MS = 10_000


def sender(broker_url: str) -> Celery:
    """A Celery app that only sends (by task name), with the workers' routes."""
    app = Celery("webhook_inbox", broker=broker_url)
    app.conf.update(task_default_queue=QUEUE, task_routes={DELIVER: {"queue": DELIVERIES}})
    return app


def make_doorbell(redis_url: str, send: Callable[[], None]) -> Callable[[], None]:
    client = redis.Redis.from_url(redis_url, socket_timeout=0.5, socket_connect_timeout=0.5)

    def ring() -> None:
        if client.set(FLAG, b"1", nx=True, px=FLAG_TTL_MS):
            send()

    return ring


class FlagClearer:
    """Clears the doorbell flag at the start of a drain (one Redis client, made on first use)."""

    def __init__(self) -> None:
        self._client: redis.Redis | None = None

    def reset(self) -> None:
        self._client = None  # a forked process must not share its parent's socket

    def clear(self, redis_url: str) -> None:
        if not redis_url:
            return
        try:
            if self._client is None:
                self._client = redis.Redis.from_url(redis_url, socket_timeout=1)
            self._client.delete(FLAG)
        except redis.RedisError:
            log.warning("could not clear the doorbell flag")


def default_doorbell(settings: Settings) -> Callable[[], None]:
    if not settings.redis_url or not settings.broker_url:
        return lambda: None  # no broker configured: the sweeper finds the events
    app = sender(settings.broker_url)
    return make_doorbell(settings.redis_url, lambda: app.send_task(DRAIN))


@dataclass(frozen=True)
class Rings:
    """Best-effort rings for the admin API, the console and the CLI."""

    start_bulk_replay: Callable[[int], None] | None = None
    ring_couriers: Callable[[set[int]], None] | None = None


def rings(settings: Settings) -> Rings:
    if not settings.broker_url:
        return Rings()
    app = sender(settings.broker_url)

    def start_bulk_replay(job_id: int) -> None:
        app.send_task(BULK_REPLAY, args=[job_id])

    def ring_couriers(endpoint_ids: set[int]) -> None:
        for endpoint_id in endpoint_ids:
            app.send_task(DELIVER, args=[endpoint_id], queue=DELIVERIES)

    return Rings(start_bulk_replay, ring_couriers)
