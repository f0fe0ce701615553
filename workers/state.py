"""What a worker process holds while it runs: its settings, engine, doorbell flag and alarms.

Made as a worker or beat starts (``start``, from the Celery signals in ``workers.app``), or
on the first task a process runs (a test's worker), from the settings its Celery app was
made with; never at import. Its connections are opened on first use, and a forked pool
process drops its parent's (``reset``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from celery import Celery, current_app
from sqlalchemy import Engine

from inbox.infra import broker, config
from inbox.infra.config import Settings
from inbox.outbound.client import PerThread
from inbox.services import runtime
from inbox.services.outages import Outages

# The app and settings of this process (``workers.app.make_celery`` binds them); kept here
# rather than in the app's conf, which ``celery inspect conf`` would show.
_bound: tuple[Celery, Settings] | None = None


@dataclass
class WorkerState:
    settings: Settings
    app: Celery
    engine_: Engine | None = None
    flag: broker.Flag = field(default_factory=broker.Flag)
    outages: Outages = field(default_factory=Outages)
    alarms: broker.Alarms = field(init=False)
    bell_: Callable[[], None] | None = None
    # The courier's HTTP clients, one per thread, kept across tasks (keep-alive).
    clients: PerThread = field(init=False)
    claimer_: ThreadPoolExecutor | None = None

    def __post_init__(self) -> None:
        horizon = broker.alarm_horizon(self.settings.sweep_seconds)
        self.alarms = broker.Alarms(self.settings.redis_url, horizon, self._send_later)
        self.clients = PerThread(self.settings.allow_private_targets)

    def _send_later(self, task: str, args: list[int], countdown: float) -> None:
        self.app.send_task(task, args=args, countdown=broker.countdown(self.settings, countdown))

    def lane_bell(self) -> None:
        """Ring the doorbell for a lane's next event (``drain_once``'s ``wake``): from a
        thread of its own (``broker.Ringer``), through the Redis flag that coalesces rings,
        so a worker never waits on Redis or the broker between two events."""
        if self.bell_ is None:
            send = self._send_drain
            redis_url = self.settings.redis_url
            self.bell_ = broker.Ringer(broker.make_doorbell(redis_url, send) if redis_url else send)
        self.bell_()

    def _send_drain(self) -> None:
        self.app.send_task(broker.DRAIN)

    def claimer(self) -> ThreadPoolExecutor:
        """The one thread that claims a drain's next batch while a batch runs
        (``drain_once``'s ``prefetch``)."""
        if self.claimer_ is None:
            self.claimer_ = ThreadPoolExecutor(1, thread_name_prefix="inbox-claim")
        return self.claimer_

    def engine(self) -> Engine:
        if self.engine_ is None:
            self.engine_ = runtime.engine(self.settings)
        return self.engine_

    def reset(self) -> None:
        """Forget the connections (a forked process): made again on first use."""
        if self.engine_ is not None:
            self.engine_.dispose(close=False)
        self.engine_ = None
        self.bell_ = None
        self.claimer_ = None  # its thread was the parent's
        self.clients.close()
        self.flag.reset()
        self.alarms.reset()


_current: WorkerState | None = None


def bind(app: Celery, settings: Settings) -> None:
    """This process runs ``app`` with ``settings``."""
    global _bound
    _bound = (app, settings)


def settings() -> Settings:
    """The settings the process's app was made with."""
    return _bound[1] if _bound is not None else config.settings()


def start() -> WorkerState:
    """This process's state, made anew."""
    global _current
    app = _bound[0] if _bound is not None else current_app
    _current = WorkerState(settings(), app)
    return _current


def use(state: WorkerState | None) -> None:
    """Put ``state`` in place (None: made again on first use)."""
    global _current
    _current = state


def current() -> WorkerState:
    return _current if _current is not None else start()


def close_clients() -> None:
    """Close the courier's kept-open connections, if this process made any."""
    if _current is not None:
        _current.clients.close()


def reset() -> None:
    if _current is not None:
        _current.reset()
