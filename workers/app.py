"""The Celery app. The broker is only a doorbell: messages carry no event data.

``celery -A workers.app worker`` / ``celery -A workers.app beat``. The broker URL is
REDIS_URL (or BROKER_URL, e.g. an amqp:// URL for RabbitMQ).

``app`` is made at import by the factory ``make_celery`` from the process's settings
(``config.settings()``): ``celery -A workers.app`` looks up the module's ``app`` and never
calls a factory. Making it does no I/O (Celery connects when a worker or beat starts).
What needs I/O happens as the process starts, in the signals below: the start checks, the
playbook modules, the metrics directory; the worker state (engine, alarms) is
``workers.state``, made on first use.
"""

from __future__ import annotations

import logging
import os
from typing import NoReturn
from urllib.parse import urlsplit

from celery import Celery
from celery.signals import (
    beat_init,
    celeryd_init,
    setup_logging,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from inbox.domain import invariants
from inbox.infra import broker, config, gc_start, tracing
from inbox.infra.config import Settings
from inbox.infra.logs import configure_logging
from inbox.services import playbooks, startup
from workers import state

log = logging.getLogger(__name__)


def make_celery(settings: Settings) -> Celery:
    conf = broker.celery_conf(settings)  # the queues, routes and transport, as senders have
    url = conf.pop("broker_url")
    app = Celery("webhook_inbox", broker=url, include=["workers.tasks"])
    # The celery command reads BROKER_URL as its --broker option and puts it (as
    # CELERY_BROKER_URL) before the app's own broker_url; for a Sentinel URL that is the
    # raw form, whose ?master_name= kombu cannot take. The read and write URLs, which
    # Celery's connections use, stay the URL kombu takes.
    app.conf.broker_read_url = app.conf.broker_write_url = url
    state.bind(app, settings)  # for the tasks and the beat
    scheme = urlsplit(settings.broker_url).scheme
    if scheme in ("redis", "sentinel"):
        # kombu's Redis transports with the broker-restart fix (see workers/transport.py)
        app.conf.broker_transport = (
            "workers.transport:Transport" if scheme == "redis" else "workers.transport:Sentinel"
        )
    transport_options = {"visibility_timeout": 3600, **conf.pop("broker_transport_options")}
    app.conf.update(conf)
    app.conf.update(
        # A task is acknowledged after it ran; a worker that dies mid-task gives its
        # message back. The database, not the message, says what is left to do.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # After a reconnect with tasks still running, celery lowers the prefetch count and
        # raises it again as they finish; with RabbitMQ's per-consumer QoS a second
        # reconnect during the first one's start-up left the courier at a prefetch it
        # never left again, receiving nothing (tests/e2e/test_broker_restarts.py). A
        # brief over-fetch after a reconnect costs nothing here: messages are doorbells.
        worker_enable_prefetch_count_reduction=False,
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        # Redis redelivers a message unacknowledged for this long; a worker holds an alarm
        # (an eta message) unacknowledged until it is due, so alarms are set at most
        # broker.ALARM_MAX_AHEAD (600 s) ahead: far below this, and below RabbitMQ's
        # consumer_timeout (30 minutes by default).
        broker_transport_options=transport_options,
        # One beat sends, however many run (workers/beat.py).
        beat_scheduler="workers.beat:LeaderScheduler",
        beat_schedule={
            "inbox-sweep": {"task": broker.SWEEP, "schedule": float(settings.sweep_seconds)},
            "inbox-prune": {"task": broker.PRUNE, "schedule": 3600.0},
            # Today's and the week's partitions exist long before they are needed; hourly,
            # so a beat that was down catches up soon after it comes back.
            "inbox-partitions": {"task": broker.PARTITIONS, "schedule": 3600.0},
            # Each source with a reconcile option runs at its own every_minutes.
            "inbox-reconcile": {"task": broker.RECONCILE, "schedule": 300.0},
            # The self-audit: new rows every minute, everything every few hours.
            "inbox-audit": {"task": broker.AUDIT, "schedule": invariants.INCREMENTAL_SECONDS},
            "inbox-audit-full": {
                "task": broker.AUDIT,
                "schedule": invariants.FULL_SECONDS,
                "kwargs": {"full": True},
            },
        },
        worker_hijack_root_logger=False,
    )
    return app


def cannot_start(settings: Settings, reason: object, code: int = startup.EX_CONFIG) -> NoReturn:
    """One line in the log (what is wrong, which setting, the fix), then exit ``code``: a
    supervisor's restart loop shows the line, not a traceback."""
    configure_logging(settings.log_level)
    log.critical("cannot start: %s", reason)
    raise SystemExit(code)


def load_playbooks(settings: Settings) -> None:
    try:
        playbooks.load(settings.playbook_modules)
    except playbooks.CannotLoad as exc:
        cannot_start(settings, exc)


settings = config.settings()
app = make_celery(settings)


@worker_init.connect  # type: ignore[untyped-decorator]
def _declare_quorum_queues(**_: object) -> None:
    # Every queue, before the consumer starts: Celery binds each queue it knows to the
    # delayed-delivery exchanges, and one that no process has declared yet is not there.
    if settings.broker_queues != "quorum":
        return
    try:
        with app.connection_for_write() as conn:
            for queue in app.amqp.queues.values():
                queue(conn.default_channel).declare()
    except Exception as exc:  # the consumer declares its own queues again as it starts
        log.warning("could not declare the quorum queues: %s", exc.__class__.__name__)


@celeryd_init.connect  # type: ignore[untyped-decorator]
@beat_init.connect  # type: ignore[untyped-decorator]
def _check_start(**_: object) -> None:
    # Before a worker, courier or beat starts work: the key for the stored secrets, and
    # the database if INBOX_REQUIRE_DATABASE_AT_START asks for it (inbox.services.startup);
    # then the playbook modules, which a forked pool process inherits. A worker's logging
    # is set up after this signal, a beat's before: JSON lines from here on, in both.
    configure_logging(settings.log_level)
    try:
        startup.check(settings)
    except startup.CannotStart as exc:
        cannot_start(settings, exc, exc.exit_code)
    load_playbooks(settings)
    state.start()  # the engine and alarms connect on first use
    if settings.metrics_dir:  # prometheus_client opens its per-process files there
        os.makedirs(settings.metrics_dir, exist_ok=True)


@worker_init.connect  # type: ignore[untyped-decorator]
@beat_init.connect  # type: ignore[untyped-decorator]
def _started(**_: object) -> None:
    # The collector, paused as the celery command loaded this app (workers/__init__.py),
    # runs again; what the start made is frozen first. After the checks and the playbook
    # modules, and before a worker forks its pool processes, which inherit both.
    gc_start.resume()


@worker_ready.connect  # type: ignore[untyped-decorator]
def _ring_at_start(**_: object) -> None:
    # A worker killed with a drain message reserved takes that message out of the queue
    # (until the broker's visibility or consumer timeout), and the doorbell flag its ring
    # set holds back every ring until it expires (broker.FLAG_TTL_MS): the soak saw events
    # wait 10 s after a worker kill. So a worker that starts clears the flag and rings:
    # what is due now is drained now.
    try:
        state.current().flag.clear(settings.redis_url)
        app.send_task(broker.DRAIN)
    except Exception as exc:  # the sweep rings anyway
        log.warning("could not ring the doorbell at start: %s", exc.__class__.__name__)


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _fresh_engine(**_: object) -> None:
    # Forked pool processes must not share the parent's database connections.
    state.reset()


@setup_logging.connect  # type: ignore[untyped-decorator]
def _json_logs(**_: object) -> None:
    # Connected, so Celery leaves the root logger to us: redacted JSON lines.
    configure_logging(settings.log_level)
    # Traces (off unless OTEL_TRACES_EXPORTER); a forked pool process inherits the
    # provider, whose batch processor starts its thread again after the fork.
    tracing.configure(settings, "celery")


@worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def _metrics_process_dead(pid: int | None = None, **_: object) -> None:
    # Drops this pool process's live gauges from the shared PROMETHEUS_MULTIPROC_DIR.
    if settings.metrics_dir:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())  # type: ignore[no-untyped-call]
    tracing.shutdown()  # export the spans still buffered


@worker_shutdown.connect  # type: ignore[untyped-decorator]
def _close_clients(**_: object) -> None:
    # The courier's kept-open connections to endpoints, closed as the worker stops.
    state.close_clients()
