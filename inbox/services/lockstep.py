"""Running a claimed batch through playbooks with outside effects, step by step in lockstep.

Step k of every event of the batch runs (steps with an outside effect on a bounded thread
pool, so the waits on the outside world and their commits overlap), then the recovery points
of all of them are written in ONE fenced statement and one commit, then step k+1. An event
whose lease is no longer its own is left out of that statement and stops there (``LeaseLost``
for it alone); an event whose step raises is failed alone (retried or quarantined). Steps
without outside effects ride with the next commit, as in ``runner``; the last step's recovery
points and the completions share one statement. So each step's recovery point is durable
before the next step of its event runs, and a completed step never runs again.

Events whose playbook claims an effect once per business key, or whose source orders events
(a judgement under a lock), take ``runner.run_claimed`` instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from inbox.domain import ordering
from inbox.domain.bodyschema import check_body
from inbox.domain.callbacks import CallbackSet, Outgoing
from inbox.domain.erasure import PayloadErased
from inbox.domain.errors import LeaseLost
from inbox.domain.outcomes import RunInterrupted, RunOutcome
from inbox.domain.playbooks import Playbook, Step, StepContext
from inbox.domain.records import Claim, Completion, EndpointId, LoadedEvent
from inbox.domain.states import EventState
from inbox.infra import metrics, tracing
from inbox.services.heartbeat import Heartbeat
from inbox.services.ports import WorkStore
from inbox.services.runner import (
    RunConfig,
    event_view,
    fail_attempt,
    log_fields,
    start_run_span,
    step_attributes,
    sync_response,
)

log = logging.getLogger(__name__)


def eligible(ev: LoadedEvent, pb: Playbook) -> bool:
    """Whether the event can run in lockstep with others (no lock-guarded step)."""
    if ordering.configured(ev.source_options) and ev.business_key_digest is not None:
        return False
    return not any(s.once_per_business_key for s in pb.steps)


_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def pool(size: int) -> ThreadPoolExecutor | None:
    """This process's pool for effect steps (None for 1: they run in the drain's thread)."""
    if size <= 1:
        return None
    with _pools_lock:
        if size not in _pools:
            _pools[size] = ThreadPoolExecutor(size, thread_name_prefix="inbox-step")
        return _pools[size]


@dataclass
class _Run:
    """One event of the batch on its way through its playbook."""

    claim: Claim
    ev: LoadedEvent
    pb: Playbook
    span: Any
    results: dict[str, Any]
    new: dict[str, Any] = field(default_factory=dict)  # results not committed yet
    outbox: list[tuple[str, list[Outgoing], Any]] = field(default_factory=list)
    step: str | None = "body_schema"  # what runs now, for the failure record


class _Renewal:
    """Extends the batch's leases when a third of the lease passed since the last commit,
    checked as each step starts and ends (a heartbeat covers one long step)."""

    def __init__(
        self,
        store: WorkStore[Any],
        lease: float,
        clock: Callable[[], float],
        since: float | None = None,
    ) -> None:
        self.store, self.lease, self.clock = store, lease, clock
        self.at = clock() if since is None else since
        self.lock = threading.Lock()

    def renewed(self) -> None:
        self.at = self.clock()

    def check(self, claims: list[Claim]) -> None:
        with self.lock:
            if self.clock() - self.at <= self.lease / 3:
                return
            with self.store.begin() as tx:
                self.store.extend(tx, claims, self.lease)
            self.at = self.clock()


def run_batch(
    store: WorkStore[Any],
    batch: list[tuple[Claim, LoadedEvent, Playbook]],
    cfg: RunConfig,
    states: Counter[str],
    workers: ThreadPoolExecutor | None = None,
    notify: Callable[[set[EndpointId]], None] | None = None,
    on_retry: Callable[[float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    advanced: Callable[[int, bool], None] | None = None,
    since: float | None = None,
) -> None:
    """Run every event of ``batch`` to its end; counts each one's resulting state.
    ``advanced`` hears, after each commit, how many events of lanes it completed and
    whether runs of the batch go on. ``since``: when the leases were last set (on
    ``clock``), if before now (a batch claimed ahead); they are renewed a third of a lease
    after it."""
    started = clock()
    renewal = _Renewal(store, cfg.lease_seconds, clock, since)
    runs: list[_Run] = []
    for c, ev, pb in batch:
        run = _Run(c, ev, pb, start_run_span(ev), dict(ev.steps))
        try:
            if ev.erased:  # its key destroyed by an erasure: nothing left to run on
                raise PayloadErased(f"The payload of {ev.public_id} was erased.")
            check_body(ev.source_options.get("body_schema") or {}, ev.body, ev.content_type)
        except Exception as exc:
            _fail(store, run, exc, cfg, states, on_retry, clock() - started)
            continue
        runs.append(run)
    k = 0
    try:
        while runs:
            effects = _run_round(store, runs, k, cfg, states, workers, renewal, on_retry, started)
            runs = _commit(
                store, runs, k, effects, cfg, states, notify, clock() - started, advanced
            )
            renewal.renewed()
            k += 1
    finally:
        for r in runs:  # the database failed under the batch: the sweep takes them back
            tracing.end_span(r.span)


def _run_round(
    store: WorkStore[Any],
    runs: list[_Run],
    k: int,
    cfg: RunConfig,
    states: Counter[str],
    workers: ThreadPoolExecutor | None,
    renewal: _Renewal,
    on_retry: Callable[[float], None] | None,
    started: float,
) -> set[int]:
    """Step k of every run; returns the ids whose step k had an outside effect. A run whose
    step raised is failed and taken out of ``runs``."""
    claims = [r.claim for r in runs]
    todo = [(r, r.pb.steps[k]) for r in runs if k < len(r.pb.steps)]
    effects: set[int] = {r.claim.id for r, s in todo if s.effect and s.name not in r.results}
    errors: dict[int, BaseException] = {}
    inline = [(r, s) for r, s in todo if workers is None or r.claim.id not in effects]
    pooled = [(r, s) for r, s in todo if workers is not None and r.claim.id in effects]
    with Heartbeat(store, claims, cfg.lease_seconds) if effects else _nothing():
        futures: list[tuple[_Run, Future[None]]] = []
        if workers is not None:
            futures = [(r, workers.submit(_step, r, s, renewal, claims)) for r, s in pooled]
        for r, s in inline:
            try:
                _step(r, s, renewal, claims)
            except Exception as exc:
                errors[r.claim.id] = exc
        for r, future in futures:
            raised = future.exception()
            if raised is not None:
                errors[r.claim.id] = raised
    for r in runs:
        error = errors.get(r.claim.id)
        if error is not None:
            _fail(store, r, error, cfg, states, on_retry, renewal.clock() - started)
    runs[:] = [r for r in runs if r.claim.id not in errors]
    return effects - set(errors)


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def _step(run: _Run, step: Step, renewal: _Renewal, claims: list[Claim]) -> None:
    """One step of one event, in its trace (from the drain's thread or the pool's)."""
    renewal.check(claims)
    with tracing.using(run.span), tracing.span("inbox.step") as current:
        if current is not None:
            current.set_attributes(step_attributes(run.ev, step.name))
        if step.name in run.results:
            # a recovery point: never run a completed step again
            tracing.set_attributes(current, {"inbox.skipped": "recovery_point"})
            return
        run.step = step.name
        ctx = StepContext(event_view(run.ev), step.name, run.results, sends=step.sends)
        value = step.fn(ctx)
        run.results[step.name] = run.new[step.name] = value
        if ctx.outbox:
            run.outbox.append((step.name, ctx.outbox, current))
    renewal.check(claims)


def _commit(
    store: WorkStore[Any],
    runs: list[_Run],
    k: int,
    effects: set[int],
    cfg: RunConfig,
    states: Counter[str],
    notify: Callable[[set[EndpointId]], None] | None,
    elapsed: float,
    advanced: Callable[[int, bool], None] | None = None,
) -> list[_Run]:
    """After step k: one transaction records the recovery points of the runs whose step k
    had an effect and completes the runs at their end, each fenced; returns the runs that
    go on (the lost ones are counted and stopped)."""
    ending = [r for r in runs if k + 1 >= len(r.pb.steps)]
    ended = {r.claim.id for r in ending}
    points = [r for r in runs if r.claim.id in effects and r.claim.id not in ended]
    if not ending and not points:
        return runs  # only steps without outside effects ran: they ride with the next commit
    with store.begin() as tx:
        live, done = set(), set()
        if points:
            live = store.record_many(tx, [(r.claim, r.new) for r in points], cfg.lease_seconds)
        if ending:
            done = store.complete_many(tx, [_completion(r) for r in ending])
        sets = [cbs for r in ending + points if r.claim.id in live | done for cbs in _callbacks(r)]
        ring = store.enqueue_deliveries(tx, sets)
    if ring and notify is not None:
        notify(ring)
    going = []
    for r in runs:
        if r.claim.id in done:
            states[EventState.COMPLETED] += 1
            metrics.record_completed(
                r.ev.tenant, r.ev.source, r.ev.age_seconds + elapsed, EventState.COMPLETED
            )
            tracing.set_attributes(r.span, {"inbox.outcome": EventState.COMPLETED})
            tracing.end_span(r.span)
        elif r.claim.id in ended or (r.claim.id in effects and r.claim.id not in live):
            _lost(r, states)
        else:
            if r.claim.id in live:
                r.new = {}
            going.append(r)
    if advanced is not None:
        lanes = sum(1 for r in ending if r.claim.id in done and r.ev.opens_next)
        advanced(lanes, bool(going))
    return going


def _completion(run: _Run) -> Completion:
    last = run.results[run.pb.steps[-1].name] if run.pb.steps else None
    decision = last if isinstance(last, dict) else {"result": last}
    done = RunOutcome.COMPLETED
    return Completion(run.claim, run.new, done, decision, sync_response(run.ev, done, decision))


def _callbacks(run: _Run) -> list[CallbackSet]:
    """The callbacks the run's committed steps decided, written in the commit's one
    statement; each carries its step's span as its trace context."""
    ev = run.ev
    sets = []
    for step, messages, span in run.outbox:
        with tracing.using(span if span is not None else run.span):
            trace_context = tracing.traceparent()
        sets.append(CallbackSet.of(ev, step, messages, trace_context))
    run.outbox = []
    return sets


def _lost(run: _Run, states: Counter[str]) -> None:
    states[RunInterrupted.LOST] += 1
    log.warning(
        "event %s: lease lost; another worker owns it now",
        run.ev.public_id,
        extra=log_fields(run.ev, outcome=RunInterrupted.LOST),
    )
    tracing.set_attributes(run.span, {"inbox.outcome": RunInterrupted.LOST})
    tracing.end_span(run.span)


def _fail(
    store: WorkStore[Any],
    run: _Run,
    exc: BaseException,
    cfg: RunConfig,
    states: Counter[str],
    on_retry: Callable[[float], None] | None,
    elapsed: float,
) -> None:
    """The run's step raised: retried or quarantined alone (its uncommitted results, of
    steps without outside effects, are dropped and run again next time)."""
    if not isinstance(exc, Exception):
        raise exc
    tracing.failed(run.span, exc)
    with tracing.using(run.span):
        try:
            state, delay = fail_attempt(
                store, run.claim, run.ev, exc, run.pb.is_permanent(exc), cfg, run.step
            )
        except LeaseLost:
            _lost(run, states)
            return
    states[state] += 1
    if state == EventState.RECEIVED and on_retry is not None:
        on_retry(delay)
    metrics.record_completed(run.ev.tenant, run.ev.source, run.ev.age_seconds + elapsed, state)
    tracing.set_attributes(run.span, {"inbox.outcome": state})
    tracing.end_span(run.span)
