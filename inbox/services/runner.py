"""Running one claimed event through its playbook, step by step.

Each step's result is committed as it completes (a recovery point); completed
steps are never run again. Steps marked ``effect=False`` have no outside effect,
so their results ride along with the next commit. Every commit is fenced.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from inbox.domain import ordering
from inbox.domain.backoff import retry_delay
from inbox.domain.bodyschema import check_body
from inbox.domain.callbacks import CallbackSet, Outgoing
from inbox.domain.erasure import PayloadErased
from inbox.domain.errors import (
    BadRequest,
    LeaseLost,
    PermanentError,
    PlaybookMissing,
    RetryableError,
)
from inbox.domain.ordering import Judgement, Newer
from inbox.domain.outcomes import RunInterrupted, RunOutcome
from inbox.domain.playbooks import EventView, Playbook, Registry, StepContext, registry
from inbox.domain.records import Claim, Completion, EndpointId, EventId, LoadedEvent
from inbox.domain.states import EventState
from inbox.infra import metrics, tracing
from inbox.infra.logs import excerpt
from inbox.services.heartbeat import Heartbeat
from inbox.services.ports import WorkStore
from inbox.services.wiring import work_store

log = logging.getLogger(__name__)

# What run_claimed returns for an event put back because another with its business key
# was running (see inbox.store.write.staleness).
DEFERRED = RunInterrupted.DEFERRED


@dataclass(frozen=True)
class RunConfig:
    lease_seconds: float = 60.0
    retry_base_seconds: float = 2.0
    retry_cap_seconds: float = 3600.0


def run_claimed(
    db: Engine | WorkStore[Any],
    c: Claim,
    cfg: RunConfig,
    reg: Registry = registry,
    notify: Callable[[set[EndpointId]], None] | None = None,
    ev: LoadedEvent | None = None,
    on_retry: Callable[[float], None] | None = None,
) -> EventState | RunInterrupted:
    """Run the event's playbook; returns the resulting state (``RunInterrupted.LOST`` if
    the lease was lost, ``DEFERRED`` if it was put back).

    ``on_retry`` hears the delay of a retry this run scheduled (the caller sets an alarm
    for it, so the retry runs when it is due, not at the next sweep).
    """
    store = work_store(db)
    try:
        if ev is None:
            with store.begin() as tx:
                ev = store.load(tx, c)
        return _run_loaded(store, c, ev, cfg, reg, notify, on_retry)
    except LeaseLost:
        log.warning(
            "event %s: lease lost; another worker owns it now",
            ev.public_id if ev is not None else c.id,
            extra=log_fields(ev, outcome=RunInterrupted.LOST)
            if ev is not None
            else {"outcome": RunInterrupted.LOST},
        )
        return RunInterrupted.LOST


def _run_loaded(
    store: WorkStore[Any],
    c: Claim,
    ev: LoadedEvent,
    cfg: RunConfig,
    reg: Registry,
    notify: Callable[[set[EndpointId]], None] | None,
    on_retry: Callable[[float], None] | None,
) -> EventState | RunInterrupted:
    loaded = time.monotonic()
    pending = _Commits(store, c, ev, cfg)
    playbook: Playbook | None = None
    try:
        playbook = reg.resolve(
            ev.tenant, ev.source, ev.event_type, ev.source_options.get("playbook")
        )
        if ev.erased:  # its key destroyed by an erasure: nothing left to run on
            raise PayloadErased(f"The payload of {ev.public_id} was erased.")
        pending.step = "body_schema"
        check_body(ev.source_options.get("body_schema") or {}, ev.body, ev.content_type)
        judgement = _judge(store, c, ev)
        if judgement is not None and judgement.busy:
            return DEFERRED  # another event about this business key is running
        newer = judgement.newer if judgement is not None else None
        outcome, decision, dup_of = _run_steps(store, c, ev, playbook, cfg, pending, newer)
    except LeaseLost:
        raise
    except PlaybookMissing as exc:
        return _hold(store, c, ev, exc)
    except Exception as exc:
        tracing.failed(tracing.current_span(), exc)
        permanent = playbook is None or playbook.is_permanent(exc)
        state, delay = fail_attempt(store, c, ev, exc, permanent, cfg, pending.step)
        if state == "received" and on_retry is not None:
            on_retry(delay)
        metrics.record_completed(
            ev.tenant, ev.source, ev.age_seconds + time.monotonic() - loaded, state
        )
        return state
    text_response = sync_response(ev, outcome, decision)
    response = text_response.encode() if text_response is not None else None
    with store.begin() as tx:
        pending.flush(tx)  # the last steps without outside effects ride with completion
        store.complete(tx, c, outcome, decision, dup_of, response)
    metrics.record_completed(
        ev.tenant, ev.source, ev.age_seconds + time.monotonic() - loaded, EventState.COMPLETED
    )
    if pending.ring and notify is not None:
        notify(pending.ring)
    return EventState.COMPLETED


def run_span(ev: LoadedEvent) -> AbstractContextManager[Any]:
    """The span of one attempt at an event (``inbox.run``), in the event's trace: a child
    of the ingest's claim, and for a retry (hours later, maybe) linked to it as well."""
    if not tracing.enabled():
        return tracing.span("inbox.run")
    return tracing.span("inbox.run", **_run_span_args(ev))


def start_run_span(ev: LoadedEvent) -> Any:
    """``run_span``'s span, started but not current (for events run in lockstep)."""
    if not tracing.enabled():
        return None
    return tracing.start_span("inbox.run", **_run_span_args(ev))


def _run_span_args(ev: LoadedEvent) -> dict[str, Any]:
    return {
        "kind": "CONSUMER",
        "attributes": {
            "inbox.tenant": ev.tenant,
            "inbox.source": ev.source,
            "inbox.event_id": ev.public_id,
            "inbox.attempt": ev.attempts,
            "inbox.replay": ev.replay,
            "messaging.system": "webhook-inbox",
            "messaging.operation.type": "process",
            "messaging.message.id": ev.public_id,
        },
        "parent": ev.trace_context,
        "link": ev.trace_context if ev.attempts > 1 or ev.replay else None,
        "link_attributes": {"inbox.link": "retry" if ev.attempts > 1 else "replay"},
    }


def log_fields(ev: LoadedEvent, **more: object) -> dict[str, object]:
    """A log line's fields for this event (docs/tracing.md lists them)."""
    return {
        "event_id": ev.public_id,
        "tenant": ev.tenant,
        "source": ev.source,
        "attempt": ev.attempts,
        **more,
    }


def _hold(store: WorkStore[Any], c: Claim, ev: LoadedEvent, exc: PlaybookMissing) -> RunInterrupted:
    """Not the event's failure: held (no attempt spent) until its playbook is registered."""
    with store.begin() as tx:
        store.hold(tx, c, exc.message)
    metrics.record_held(ev.tenant, ev.source)
    log.warning(
        "event %s held: source %s/%s names playbook %r, which no module in INBOX_PLAYBOOKS"
        " of this process registers; it runs once a worker that has it sweeps",
        ev.public_id,
        ev.tenant,
        ev.source,
        exc.name,
        extra=log_fields(ev, outcome=RunInterrupted.HELD, playbook=exc.name),
    )
    return RunInterrupted.HELD


def _judge(store: WorkStore[Any], c: Claim, ev: LoadedEvent) -> Judgement | None:
    """Stale or not, for a source that names the provider's event time or version."""
    if not ordering.configured(ev.source_options) or ev.business_key_digest is None:
        return None
    try:
        doc = json.loads(ev.body)
    except ValueError:
        return None
    try:
        mine = ordering.position_of(ev.source_options, doc)
    except BadRequest as exc:  # the source's options changed since the event was accepted
        raise PermanentError(exc.message) from exc
    if mine is None:
        return None
    with store.begin() as tx:
        return store.judge(tx, c, ev.tenant_id, ev.business_key_digest, mine)


def event_view(ev: LoadedEvent) -> EventView:
    """What a playbook sees of a loaded event."""
    return EventView(
        ev.id,
        ev.public_id,
        ev.tenant,
        ev.source,
        ev.event_type,
        ev.content_type,
        ev.body,
        ev.attempts,
        ev.replay,
    )


def sync_response(ev: LoadedEvent, outcome: RunOutcome, decision: dict[str, Any]) -> str | None:
    """What a synchronous (``Prefer: wait``) sender is answered, and duplicates replayed."""
    if not ev.sync:
        return None
    return json.dumps(
        {"id": ev.public_id, "status": outcome, "decision": decision}, separators=(",", ":")
    )


def is_pure(pb: Playbook) -> bool:
    """No step has an outside effect: no recovery point is needed between them."""
    return all(not s.effect and not s.once_per_business_key for s in pb.steps)


def run_in_memory(ev: LoadedEvent, pb: Playbook, c: Claim) -> Completion | None:
    """Run a pure playbook without touching the database.

    None when the per-event path must take over: a failure (it re-runs the steps,
    which have no outside effects, and records the failure), callbacks to write, or
    an event to judge for staleness (under a lock, in the database).
    """
    if ordering.configured(ev.source_options) and ev.business_key_digest is not None:
        return None
    try:
        check_body(ev.source_options.get("body_schema") or {}, ev.body, ev.content_type)
        view = event_view(ev)
        results: dict[str, Any] = dict(ev.steps)
        new: dict[str, Any] = {}
        for step in pb.steps:
            if step.name in results:
                continue
            with tracing.span("inbox.step") as current:
                if current is not None:
                    current.set_attributes(step_attributes(ev, step.name))
                ctx = StepContext(view, step.name, results, sends=step.sends)
                results[step.name] = new[step.name] = step.fn(ctx)
            if ctx.outbox:
                return None
    except Exception:
        return None
    last = results[pb.steps[-1].name] if pb.steps else None
    decision = last if isinstance(last, dict) else {"result": last}
    done = RunOutcome.COMPLETED
    return Completion(c, new, done, decision, sync_response(ev, done, decision))


class _Commits:
    """Step results (and the deliveries they decided) waiting for their commit."""

    def __init__(self, store: WorkStore[Any], c: Claim, ev: LoadedEvent, cfg: RunConfig) -> None:
        self.store, self.c, self.ev, self.cfg = store, c, ev, cfg
        self.results: dict[str, Any] = {}
        self.outbox: list[tuple[str, list[Outgoing]]] = []
        self.ring: set[EndpointId] = set()
        # What is running now, for the failure record: None while the playbook is chosen.
        self.step: str | None = None

    def add(self, step: str, result: Any, outbox: list[Outgoing] | None = None) -> None:
        self.results[step] = result
        if outbox:
            self.outbox.append((step, outbox))

    def flush(self, tx: object) -> None:
        """Write the recovery points and their deliveries in the caller's transaction."""
        self.store.record_steps(tx, self.c, self.results, self.cfg.lease_seconds)
        trace_context = tracing.traceparent()  # the run's span: each attempt continues it
        self.ring |= self.store.enqueue_deliveries(
            tx, [CallbackSet.of(self.ev, s, m, trace_context) for s, m in self.outbox]
        )
        self.results, self.outbox = {}, []

    def commit(self) -> None:
        with self.store.begin() as tx:
            self.flush(tx)


def _run_steps(
    store: WorkStore[Any],
    c: Claim,
    ev: LoadedEvent,
    pb: Playbook,
    cfg: RunConfig,
    pending: _Commits,
    newer: Newer | None = None,
) -> tuple[RunOutcome, dict[str, Any], EventId | None]:
    view = event_view(ev)
    results: dict[str, Any] = dict(ev.steps)
    outcome, dup_of = RunOutcome.COMPLETED, None
    for step in pb.steps:
        with tracing.span("inbox.step") as current:
            if current is not None:
                current.set_attributes(step_attributes(ev, step.name))
            if step.name in results:
                # a recovery point: never run a completed step again
                tracing.set_attributes(current, {"inbox.skipped": "recovery_point"})
                continue
            pending.step = step.name
            if newer is not None and step.skip_if_stale:
                results[step.name] = {"skipped": "stale", "newer_event": newer.public_id}
                pending.add(step.name, results[step.name])
                tracing.set_attributes(current, {"inbox.skipped": "stale"})
                continue
            if step.once_per_business_key and ev.business_key_digest is not None:
                with store.begin() as tx:
                    pending.flush(tx)
                    owner = store.claim_effect(
                        tx, c, ev.tenant_id, f"{pb.name}.{step.name}", ev.business_key_digest
                    )
                if owner != ev.id:
                    outcome, dup_of = RunOutcome.DUPLICATE_FACT, owner
                    results[step.name] = {"skipped": "duplicate_fact", "first_event_id": owner}
                    pending.add(step.name, results[step.name])
                    tracing.set_attributes(current, {"inbox.skipped": "duplicate_fact"})
                    continue
            ctx = StepContext(view, step.name, results, newer=newer, sends=step.sends)
            with Heartbeat(store, c, cfg.lease_seconds):
                value = step.fn(ctx)
            results[step.name] = value
            pending.add(step.name, value, ctx.outbox)
            if step.effect:
                pending.commit()  # its deliveries carry this span's context
    last = results[pb.steps[-1].name] if pb.steps else None
    decision = last if isinstance(last, dict) else {"result": last}
    return (RunOutcome.STALE if newer is not None else outcome), decision, dup_of


def step_attributes(ev: LoadedEvent, step: str) -> dict[str, str | int]:
    return {
        "inbox.tenant": ev.tenant,
        "inbox.source": ev.source,
        "inbox.event_id": ev.public_id,
        "inbox.step": step,
        "inbox.attempt": ev.attempts,
    }


def fail_attempt(
    db: Engine | WorkStore[Any],
    c: Claim,
    ev: LoadedEvent,
    exc: Exception,
    permanent: bool,
    cfg: RunConfig,
    step: str | None = None,
) -> tuple[EventState, float]:
    store = work_store(db)
    delay = retry_delay(ev.attempts, cfg.retry_base_seconds, cfg.retry_cap_seconds)
    if isinstance(exc, RetryableError) and exc.delay is not None:
        delay = exc.delay
    with store.begin() as tx:
        failed = store.fail(tx, c, exc, permanent or isinstance(exc, PermanentError), delay, step)
    state = EventState(failed)
    # Every failed attempt is logged: a retry as a warning, a quarantine as an error.
    log.log(
        logging.WARNING if state == EventState.RECEIVED else logging.ERROR,
        "event %s attempt %s failed in %s (%s: %s): %s",
        ev.public_id,
        ev.attempts,
        step or "choosing the playbook",
        type(exc).__name__,
        excerpt(exc),
        f"retry in {delay:.0f} s" if state == EventState.RECEIVED else state,
        extra=log_fields(ev, step=step, outcome=state, error_class=type(exc).__name__),
    )
    return state, delay
