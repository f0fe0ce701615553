"""The broker, as every process sees it: a doorbell, never a carrier of event data.

Messages carry row ids only, and are sent by task *name*, so nothing here (nor in the web
app or the CLI) imports the worker shell. The sweeper re-rings for anything a lost message
missed, so every ring here is best effort.

The doorbell after a commit: a Redis flag (SET NX) coalesces rings, so while a drain is
pending or running further rings send nothing. The drain task holds the flag while its claims
find events and clears it only before a last claim, so an event committed before a
suppressed ring is always seen by a claim of that drain; one committed after the clear rings
anew (``Flag``). The flag expires, and the sweeper re-rings, so a lost message delays
events by at most one sweep.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from celery import Celery
from kombu.entity import Exchange, Queue

from inbox.infra import redis_client
from inbox.infra.config import Settings

log = logging.getLogger(__name__)

QUEUE = "inbox"
DELIVERIES = "deliveries"
DRAIN = "inbox.drain"
DELIVER = "inbox.deliver"
SWEEP = "inbox.sweep"
PRUNE = "inbox.prune"
PARTITIONS = "inbox.partitions"
RECONCILE = "inbox.reconcile"
BULK_REPLAY = "inbox.bulk_replay"
AUDIT = "inbox.audit"  # the self-audit (inbox.services.audit)
FLAG = "inbox:doorbell"
FLAG_TTL_MS = 10_000
ALARM = "inbox:alarm:"
ALARM_SLOT = 0.25  # alarms due within one slot share one message
ALARM_MAX_AHEAD = 600.0  # far below Redis's visibility_timeout and RabbitMQ's consumer_timeout


QUEUE_TYPES = ("classic", "quorum")  # INBOX_BROKER_QUEUES


def celery_conf(settings: Settings) -> dict[str, Any]:
    """What every Celery app of the inbox, sender or worker, is told of its broker: the
    URL (``inbox.infra.redis_client.kombu_broker``: a Sentinel URL as kombu takes it), the
    transport options, the queues and the routes.

    ``INBOX_BROKER_QUEUES=quorum`` (RabbitMQ): both queues are declared quorum queues
    (``x-queue-type: quorum``, replicated by Raft, so they outlive a node). What Celery
    requires with them: no global QoS (``worker_detect_quorum_queues``, which turns it off
    when a quorum queue is consumed), and exchanges that are not direct, so a countdown
    (the retry alarms) goes through RabbitMQ's native delayed delivery instead of being
    held by a worker; publisher confirms, so a send returns once the queue has the message.
    A queue's type is fixed when it is declared: an existing classic queue of the same
    name is refused (PRECONDITION_FAILED), so switching takes a new vhost (docs/ha.md).
    """
    if settings.broker_queues not in QUEUE_TYPES:
        raise RuntimeError(
            f"INBOX_BROKER_QUEUES={settings.broker_queues!r}: use 'classic' or 'quorum'"
        )
    url, options = redis_client.kombu_broker(settings.broker_url)
    conf: dict[str, Any] = {
        "broker_url": url or None,
        "task_default_queue": QUEUE,
        "task_routes": {DELIVER: {"queue": DELIVERIES}},
        "broker_transport_options": options,
    }
    if settings.broker_queues == "quorum":
        conf.update(
            task_queues=[_quorum_queue(name) for name in (QUEUE, DELIVERIES)],
            task_default_exchange=QUEUE,
            task_default_exchange_type="topic",
            task_default_routing_key=QUEUE,
            task_default_queue_type="quorum",
            task_create_missing_queue_type="quorum",
            worker_detect_quorum_queues=True,
            broker_native_delayed_delivery_queue_type="quorum",
            broker_transport_options={**options, "confirm_publish": True},
        )
    return conf


def _quorum_queue(name: str) -> Queue:
    # One topic exchange for both queues: Celery binds every queue's exchange to the
    # delayed-delivery exchanges when a worker starts, and an exchange of a queue that no
    # process has declared yet (the couriers' while only workers run) is not there.
    exchange = Exchange(QUEUE, type="topic")  # type: ignore[no-untyped-call]
    queue: Queue = Queue(  # type: ignore[no-untyped-call]
        name, exchange, routing_key=name, queue_arguments={"x-queue-type": "quorum"}
    )
    return queue


def countdown(settings: Settings, seconds: float) -> float:
    """A countdown as the broker can keep it. RabbitMQ's native delayed delivery (quorum
    queues) counts whole seconds and refuses less than one: rounded up, never early."""
    if settings.broker_queues == "quorum" and seconds > 0:
        return float(math.ceil(seconds))
    return seconds


def sender(settings: Settings) -> Celery:
    """A Celery app that only sends (by task name), with the workers' queues and routes."""
    conf = celery_conf(settings)
    app = Celery("webhook_inbox", broker=conf.pop("broker_url"))
    app.conf.update(conf)
    return app


def make_doorbell(redis_url: str, send: Callable[[], None]) -> Callable[[], None]:
    client = redis_client.client(redis_url, socket_timeout=0.5, socket_connect_timeout=0.5)

    def ring() -> None:
        if client.set(FLAG, b"1", nx=True, px=FLAG_TTL_MS):
            try:
                send()
            except Exception:
                # Nothing was sent: a flag left set would hold back every ring for its TTL
                # (a broker restart stranded events for 10 s that way), so it goes too.
                with contextlib.suppress(redis.RedisError):
                    client.delete(FLAG)
                raise

    return ring


class Ringer:
    """A doorbell that rings from a thread of its own: a request never waits on Redis or
    the broker (when Redis stalls, that would be up to its socket timeout per event), and
    the rings of one process coalesce.

    ``__call__`` (after a commit) marks a ring as wanted and returns. The thread rings
    ``ring`` (``make_doorbell``'s: the flag, then the drain task) once per batch of wants,
    each ring starting after the wants it answers, so every committed event is followed by a
    ring; then it pauses ``gap`` seconds, so a process rings at most 1/gap times a second
    however fast events arrive. A ring that fails (Redis or the broker down) is rung again,
    ``retry`` seconds later and doubling up to ``retry_max``, until one goes out: what it
    answered is drained as soon as the broker is back, not at the next sweep. The first
    failure of a run is logged, and the ring that ends it. A forked child starts a thread of
    its own on first use."""

    def __init__(
        self,
        ring: Callable[[], None],
        gap: float = 0.005,
        retry: float = 0.1,
        retry_max: float = 2.0,
    ) -> None:
        self._ring = ring
        self._gap = gap
        self._retry = retry
        self._retry_max = retry_max
        self._cond = threading.Condition()
        self._wanted = False
        self._pid = 0
        self.rings = 0  # rings made, for tests
        ref = weakref.ref(self)

        def forget() -> None:  # a lock a parent's thread held at the fork stays held here
            me = ref()
            if me is not None:
                me._cond, me._wanted, me._pid = threading.Condition(), False, 0

        os.register_at_fork(after_in_child=forget)

    def __call__(self) -> None:
        with self._cond:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="inbox-doorbell", daemon=True).start()
            self._wanted = True
            self._cond.notify()

    def _run(self) -> None:
        cond = self._cond
        failed = 0  # rings failed in a row
        while True:
            with cond:
                while not self._wanted:
                    cond.wait()
                self._wanted = False
            try:
                self._ring()
            except Exception as exc:
                failed += 1
                if failed == 1:
                    log.warning(
                        "doorbell failed: %s; ringing again until it goes out",
                        exc.__class__.__name__,
                        extra={"error_class": type(exc).__name__},
                    )
                with cond:
                    self._wanted = True  # what it answered still waits for a drain
                time.sleep(min(self._retry_max, self._retry * 2 ** (failed - 1)))
                continue
            self.rings += 1
            if failed:
                log.info("doorbell rings again after %d failed rings", failed)
                failed = 0
            time.sleep(self._gap)


class Flag:
    """A drain task's side of the doorbell flag (one Redis client, made on first use).

    A drain holds the flag while it runs (``hold``), so the rings of events committed
    meanwhile send nothing: its next claim takes them. It lets go (``clear``) only when a
    claim finds nothing, and claims once more after that; should that claim find events, it
    takes the flag again (``take``) or, if a ring took it first, leaves them to the drain
    that ring sent. Redis unreachable: ``take`` answers True (ringing twice costs a task,
    holding back a ring strands events until the sweep)."""

    def __init__(self) -> None:
        self._client: redis.Redis | None = None

    def reset(self) -> None:
        self._client = None  # a forked process must not share its parent's socket

    def _redis(self, redis_url: str) -> redis.Redis:
        if self._client is None:
            self._client = redis_client.client(redis_url, socket_timeout=1)
        return self._client

    def hold(self, redis_url: str) -> None:
        """Set the flag, or renew its TTL: the drain that holds it runs for a while."""
        if not redis_url:
            return
        try:
            self._redis(redis_url).set(FLAG, b"1", px=FLAG_TTL_MS)
        except redis.RedisError:
            log.warning("could not hold the doorbell flag")

    def take(self, redis_url: str) -> bool:
        """Set the flag if no ring has: whether this drain holds it now."""
        if not redis_url:
            return True
        try:
            return bool(self._redis(redis_url).set(FLAG, b"1", nx=True, px=FLAG_TTL_MS))
        except redis.RedisError:
            log.warning("could not take the doorbell flag")
            return True

    def clear(self, redis_url: str) -> None:
        if not redis_url:
            return
        try:
            self._redis(redis_url).delete(FLAG)
        except redis.RedisError:
            log.warning("could not clear the doorbell flag")


def alarm_horizon(sweep_seconds: float) -> float:
    """How far ahead an alarm is set. A retry due later gets its alarm from a later sweep,
    so the horizon covers two sweeps; it stays short because a worker holds an eta
    message unacknowledged until it is due (Redis redelivers after visibility_timeout,
    RabbitMQ closes a channel after consumer_timeout, 30 minutes by default)."""
    return min(ALARM_MAX_AHEAD, 2.0 * sweep_seconds + 5.0)


class Alarms:
    """Delayed doorbells: a task rung when a retry falls due, not at the next sweep.

    ``send(task, args, countdown)`` sends an eta message. Alarms for the same task and
    arguments due in the same slot are coalesced with a Redis key (SET NX), so a thousand
    events retried together cost one message per slot. An alarm is never early: its slot
    is rounded up. A lost alarm costs at most one sweep (the sweep sets them again).
    """

    def __init__(
        self, redis_url: str, horizon: float, send: Callable[[str, list[int], float], None]
    ) -> None:
        self.redis_url, self.horizon, self._send = redis_url, horizon, send
        self._client: redis.Redis | None = None
        self.clock: Callable[[], float] = time.time

    def reset(self) -> None:
        self._client = None  # a forked process must not share its parent's socket

    def set(self, task: str, args: list[int], delay: float) -> bool:
        """Ring ``task`` in ``delay`` seconds (unless that slot is rung already)."""
        if delay > self.horizon:
            return False  # a later sweep sets it
        now = self.clock()
        slot = math.ceil((now + max(0.0, delay)) / ALARM_SLOT) * ALARM_SLOT
        key = f"{ALARM}{task}:{','.join(map(str, args))}:{slot:.2f}"
        try:
            if self.redis_url:
                if self._client is None:
                    self._client = redis_client.client(self.redis_url, socket_timeout=1)
                if not self._client.set(key, b"1", nx=True, px=int((delay + 60) * 1000)):
                    return False
        except redis.RedisError:
            log.warning("could not coalesce an alarm; sending it anyway")
        self._send(task, args, max(0.0, slot - now))
        return True


BEAT_LEASE = "inbox:beat:leader"
# Take the lease if it is free, or renew it if it is ours; atomic, so two beats never both
# hold it (a GET then PEXPIRE could renew a lease another beat had just taken).
_TAKE_OR_RENEW = """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 1
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


def beat_lease_seconds(sweep_seconds: float) -> float:
    """The leading beat renews at every sweep it sends; its lease outlives one missed sweep,
    so a stalled leader is not replaced at once, and a dead one within about two sweeps."""
    return 2.0 * sweep_seconds + 5.0


class BeatLease:
    """One beat sends the periodic tasks, however many run (for redundancy): the holder of
    a Redis lease. The others stand by and take over once it lapses. Without Redis every
    beat sends: a sweep sent twice is waste, a sweep not sent cuts the lifeline."""

    def __init__(self, redis_url: str, ttl_seconds: float, owner: str, key: str = BEAT_LEASE):
        self.redis_url, self.owner, self.key = redis_url, owner, key
        self.ttl_ms = max(1, int(ttl_seconds * 1000))
        self._client: redis.Redis | None = None

    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = redis_client.client(self.redis_url, socket_timeout=1)
        return self._client

    def held(self) -> bool:
        """Take or renew the lease; True when this beat should send."""
        if not self.redis_url:
            return True
        try:
            taken = self._redis().eval(_TAKE_OR_RENEW, 1, self.key, self.owner, self.ttl_ms)
            return bool(taken)
        except redis.RedisError:
            log.warning("could not reach Redis for the beat lease; sending anyway")
            return True

    def release(self) -> None:
        """At a clean shutdown: a standing-by beat takes over at its next due task."""
        if not self.redis_url:
            return
        try:
            self._redis().eval(_RELEASE, 1, self.key, self.owner)
        except redis.RedisError:
            pass  # it lapses on its own


def default_doorbell(settings: Settings, background: bool = False) -> Callable[[], None]:
    """The doorbell of ``settings``' Redis and broker; ``background``: rung by a
    ``Ringer`` (the web's: a short-lived process, the CLI, rings in line, as it may exit
    right after)."""
    if not settings.redis_url or not settings.broker_url:
        return lambda: None  # no broker configured: the sweeper finds the events
    app = sender(settings)
    ring = make_doorbell(settings.redis_url, lambda: app.send_task(DRAIN))
    return Ringer(ring) if background else ring


@dataclass(frozen=True)
class Rings:
    """Best-effort rings for the admin API, the console and the CLI."""

    start_bulk_replay: Callable[[int], None] | None = None
    ring_couriers: Callable[[set[int]], None] | None = None


def rings(settings: Settings) -> Rings:
    if not settings.broker_url:
        return Rings()
    app = sender(settings)

    def start_bulk_replay(job_id: int) -> None:
        app.send_task(BULK_REPLAY, args=[job_id])

    def ring_couriers(endpoint_ids: set[int]) -> None:
        for endpoint_id in endpoint_ids:
            app.send_task(DELIVER, args=[endpoint_id], queue=DELIVERIES)

    return Rings(start_bulk_replay, ring_couriers)
