"""Celery tasks: a few lines each over the services.

Shared tasks: they belong to the app that runs them (``workers.app``), which this module
does not import; what they use (settings, engine, alarms) is the process's
``workers.state``."""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future
from typing import ParamSpec, TypeVar

from celery import shared_task
from sqlalchemy import Engine

from inbox.domain.approval import BulkStatus
from inbox.domain.records import BulkJobId, EndpointId
from inbox.infra import broker
from inbox.services import audit as auditor
from inbox.services import erasure, gapfill, upkeep
from inbox.services import sweep as sweeper
from inbox.services.bulk import run_bulk_once
from inbox.services.courier import BATCH, deliver_once, policy_of
from inbox.services.drain import Claimed, drain_once
from inbox.services.outages import timed_out
from inbox.services.runner import DEFERRED
from inbox.services.runtime import Runtime
from workers import state

log = logging.getLogger(__name__)
DRAIN_BUDGET_SECONDS = 5.0
# A drain claims the next batch while a full one runs only after a batch that took less
# than this: then the claim is a large share of a batch's time, and the events claimed
# ahead wait about that long at most. After a slow batch (steps that wait on the outside
# world) they would wait out the next one while another worker process is free to run them.
AHEAD_BELOW_SECONDS = 0.5
BUSY_RETRY_SECONDS = 0.5  # a courier that found its endpoint busy rings again after this
BUSY_TRIES = 2  # a held endpoint is looked at again this often in the task, then an alarm
BUSY_PAUSE_SECONDS = 0.02  # ... about this far apart
P = ParamSpec("P")
R = TypeVar("R")


def through_outages(task: Callable[P, R]) -> Callable[P, R | None]:
    """A task that meets a database outage (a failover, a restart) ends quietly: one
    WARNING per outage and process instead of Celery's ERROR and traceback per task.
    Nothing is dropped: the sweeper re-rings for what is still due, and an expired lease
    is requeued."""

    @functools.wraps(task)
    def run(*args: P.args, **kwargs: P.kwargs) -> R | None:
        outages = state.current().outages
        started = time.monotonic()
        try:
            result = task(*args, **kwargs)
        except Exception as exc:
            if not outages.absorb(exc):
                raise
            return None
        outages.answered(started)
        return result

    return run


def engine() -> Engine:
    return state.current().engine()


def runtime() -> Runtime:
    """The process's settings and engine, as a use case takes them (no bells: a task
    rings through the app)."""
    current = state.current()
    return Runtime(current.settings, current.engine())


def set_alarms(task: str, args: list[int], delays: list[float]) -> None:
    """One alarm per slot for the retries just scheduled (best effort: the sweep re-sets)."""
    for delay in sorted(set(delays)):
        try:
            state.current().alarms.set(task, args, delay)
        except Exception:
            log.warning("could not set an alarm for %s", task, exc_info=True)


@shared_task(name=broker.DRAIN)  # type: ignore[untyped-decorator]
@through_outages
def drain() -> int:
    """Drain due events for a few seconds; ring again if work remains.

    The task holds the doorbell flag while its claims find events (``broker.Flag``): the
    rings of events committed meanwhile send nothing, and after a claim that found a few it
    waits ``INBOX_DRAIN_LINGER_MS`` and claims again. At a steady rate one task so serves a stream
    of events a claim of several at a time, where a task per ring paid Celery's dispatch,
    a claim and a commit for one or two (issue #45: the worker's CPU per event in the whole
    pipeline was nine times its own over a backlog). A claim that finds nothing lets the
    flag go and claims once more, then the task ends: an idle system runs no task."""
    current = state.current()
    settings = current.settings
    url = settings.redis_url
    current.flag.hold(url)
    holding = True
    deadline = time.monotonic() + DRAIN_BUDGET_SECONDS
    done, helped = 0, False
    ahead: Future[Claimed] | None = None  # the next batch, claimed while one ran
    took = AHEAD_BELOW_SECONDS  # how long the last batch ran: none yet, so none claimed ahead
    try:
        while time.monotonic() < deadline or ahead is not None:
            claimed, ahead = (ahead.result() if ahead is not None else None), None
            started = time.monotonic()
            quick = started < deadline and took < AHEAD_BELOW_SECONDS
            batch = drain_once(
                runtime(),
                notify=ring_couriers,
                wake=current.lane_bell,
                claimed=claimed,
                prefetch=current.claimer() if quick else None,
            )
            took, ahead = time.monotonic() - started, batch.next
            set_alarms(broker.DRAIN, [], batch.retry_in)
            done += batch.claimed
            if batch.states.get(DEFERRED):
                # Put back behind another event with its business key: look again shortly.
                drain.apply_async(countdown=1)
            if batch.claimed and not holding:
                # Events came after the flag went: hold it again, unless a ring took it
                # first (a drain is on its way for them).
                holding = current.flag.take(url)
                if not holding and ahead is None:
                    return done
            if batch.claimed >= settings.batch_size:
                if not helped:
                    drain.delay()  # a full batch: let another worker process help
                    helped = True
                continue
            if batch.advanced:
                continue  # a lane moved on: its next event is claimable at once
            if batch.claimed:
                # Events are arriving: take the next ones together. 50 ms by default: at
                # 270/s a claim of 13 instead of 7 at 25 ms (the worker's CPU per event in
                # the whole pipeline 0.53 ms against 0.93, bench/README.md), short beside
                # the 1 s latency bar.
                time.sleep(settings.drain_linger_ms / 1000)
                continue
            if not holding:
                return done  # drained
            current.flag.clear(url)  # then one more claim: a ring held back meanwhile
            holding = False
        drain.delay()  # out of time with work left: continue in a fresh task
        return done
    finally:
        if holding:
            current.flag.clear(url)  # an ending task holds back no ring
        if ahead is not None:  # a failure between batches: the sweep takes it back
            ahead.cancel()


def ring_couriers(endpoint_ids: Collection[int]) -> None:
    for endpoint_id in endpoint_ids:
        deliver.delay(endpoint_id)


@shared_task(name=broker.DELIVER)  # type: ignore[untyped-decorator]
@through_outages
def deliver(endpoint_id: int) -> dict[str, int]:
    """Send one endpoint's due deliveries for a few seconds; ring again if some are left."""
    settings = state.current().settings
    deadline = time.monotonic() + DRAIN_BUDGET_SECONDS
    total: dict[str, int] = {}
    while True:
        try:
            result = deliver_once(
                engine(),
                EndpointId(endpoint_id),
                client=state.current().clients.get(),  # kept across tasks: keep-alive
                allow_private=settings.allow_private_targets,
                lease_seconds=settings.lease_seconds,
                policy=policy_of(settings),
            )
        except Exception as exc:
            # A claim no longer waits for the endpoint's row (a held one is skipped), but a
            # round that recorded failures takes it, and on a loaded machine a statement can
            # pass the database timeout. That is contention, not a failure: one line and a
            # ring a moment later, not an ERROR with a traceback per task (formatting and
            # redacting those took up to 40 % of the courier's CPU under load,
            # bench/README.md). What the round had claimed and not recorded is sent again
            # after its lease, as after any failed round.
            why = timed_out(exc)
            if why is None:
                raise
            log.warning(
                "endpoint %s busy (%s); ringing again in %.1f s",
                endpoint_id,
                why,
                BUSY_RETRY_SECONDS,
                extra={"endpoint_id": endpoint_id, "error_class": type(exc).__name__},
            )
            # An alarm, not a send: the busy tasks of one moment share one ring (a slot of
            # broker.ALARM_SLOT), so contention does not multiply the tasks that meet it.
            set_alarms(broker.DELIVER, [endpoint_id], [BUSY_RETRY_SECONDS])
            return total
        for name, value in vars(result).items():
            if isinstance(value, int):
                total[name] = total.get(name, 0) + value
        if result.busy and total["busy"] <= BUSY_TRIES:
            # Another courier holds the endpoint for the few ms of its claim: look again
            # shortly, in this task (a new task per busy round cost more CPU than the
            # round), holding no connection and waiting on no lock meanwhile.
            time.sleep(BUSY_PAUSE_SECONDS * random.uniform(0.5, 1.5))
            continue
        set_alarms(broker.DELIVER, [endpoint_id], result.retry_in)
        if result.closed:  # the probe answered: the backlog is due, drain it in parallel
            ring_couriers([endpoint_id] * max(0, result.ring - 1))
            continue
        if result.claimed < BATCH or result.released:
            return total  # drained, or the endpoint stopped answering: the sweeper resumes
        if time.monotonic() >= deadline:
            deliver.delay(endpoint_id)  # more is due: continue in a fresh task
            return total


@shared_task(name=broker.SWEEP)  # type: ignore[untyped-decorator]
@through_outages
def sweep() -> dict[str, int]:
    """The lifeline (``inbox.services.sweep``): requeue, then ring for anything due."""
    swept = sweeper.run_once(runtime(), state.current().alarms.horizon, broker.ALARM_SLOT)
    if swept.drain_now:
        drain.delay()
    ring_couriers(swept.endpoints)
    set_alarms(broker.DRAIN, [], swept.drain_alarms)
    for endpoint_id, delay in swept.deliver_alarms:
        set_alarms(broker.DELIVER, [endpoint_id], [delay])
    for job_id in swept.jobs:
        bulk_replay.delay(job_id)
    return swept.counts()


@shared_task(name=broker.PRUNE)  # type: ignore[untyped-decorator]
@through_outages
def prune() -> dict[str, object]:
    """Retention: expired keys, old raw bodies, old delivery attempts, old ledger days; and
    any erasure a crash left between its two databases, finished."""
    r = upkeep.prune(runtime())
    resumed = erasure.resume(runtime())
    return {
        "erasures_resumed": resumed,
        "keys": r.keys_removed,
        "bodies": r.bodies_removed,
        "attempts_folded": r.attempts_folded,
        "refused": r.refused_sources,
        "days_dropped": r.days_dropped,
        "days_kept": r.days_kept,
    }


@shared_task(name=broker.PARTITIONS)  # type: ignore[untyped-decorator]
@through_outages
def make_partitions() -> dict[str, object]:
    """The ledger's partitions for today and the week ahead (rows in DEFAULT moved out)."""
    made = upkeep.ensure_partitions(runtime())
    return {"created": made.created, "moved": made.moved}


@shared_task(name=broker.RECONCILE)  # type: ignore[untyped-decorator]
@through_outages
def reconcile_sources() -> dict[str, object]:
    """Gaps found at the provider: every source whose reconcile interval has passed."""
    done = gapfill.run_due(runtime())
    return {
        "sources": len(done),
        "imported": sum(r.imported for r in done),
        "redelivered": sum(r.redelivered for r in done),
    }


@shared_task(name=broker.BULK_REPLAY)  # type: ignore[untyped-decorator]
@through_outages
def bulk_replay(job_id: int) -> dict[str, object]:
    """Run a bulk replay at its rate for a few minutes; continue in a fresh task if needed."""
    r = run_bulk_once(
        runtime(),
        BulkJobId(job_id),
        budget_seconds=300,
        ring_doorbell=drain.delay,
        ring_couriers=ring_couriers,
    )
    if r.status == BulkStatus.RUNNING:
        bulk_replay.delay(job_id)
    result: dict[str, object] = r.to_dict()
    return result


@shared_task(name=broker.AUDIT)  # type: ignore[untyped-decorator]
@through_outages
def audit(full: bool = False) -> dict[str, object]:
    """The self-audit: an incremental pass (or a full one, a day at a time, going on where
    an unfinished one stopped); violations are logged, counted and kept for the console
    (``inbox.services.audit``)."""
    report = auditor.run(runtime(), full=full, resume=full)
    return {"mode": report.mode, "violations": report.violations, "seconds": report.seconds}
