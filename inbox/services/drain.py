"""The daemons' bodies as plain functions: each ``*_once`` does one round and returns counts.

Celery tasks in ``workers/`` are thin shells over these; tests call them directly.
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from inbox.domain.outcomes import RunInterrupted
from inbox.domain.playbooks import Playbook, Registry, registry
from inbox.domain.records import Claim, Completion, EndpointId, EventId, LoadedEvent
from inbox.domain.states import EventState
from inbox.infra import metrics, tracing
from inbox.infra.config import Settings
from inbox.services import lockstep
from inbox.services.ports import WorkStore
from inbox.services.runner import RunConfig, is_pure, run_claimed, run_in_memory, run_span
from inbox.services.runtime import Runtime
from inbox.services.wiring import work_store
from inbox.store.reads import queue as queue_reads
from inbox.store.write import queue


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_config(settings: Settings) -> RunConfig:
    return RunConfig(
        lease_seconds=settings.lease_seconds,
        retry_base_seconds=settings.retry_base_seconds,
    )


@dataclass
class DrainResult:
    claimed: int = 0
    states: Counter[str] = field(default_factory=Counter)
    retry_in: list[float] = field(default_factory=list)  # seconds until each retry is due
    # Events of a lane (an ordered source's business key), or of a tenant with an in-flight
    # cap, that completed: each may have let its lane's (or tenant's) next event become
    # claimable, so the caller claims again at once.
    advanced: int = 0
    # The next batch, claimed while this one ran (``drain_once``'s ``prefetch``): the
    # caller hands it to its next ``drain_once`` as ``claimed``, or runs it before it ends.
    next: Future[Claimed] | None = None


@dataclass(frozen=True)
class Claimed:
    """A claimed batch, loaded, and when it was claimed (``time.monotonic``)."""

    claims: list[Claim]
    loaded: dict[EventId, LoadedEvent]
    at: float


def claim_batch(store: WorkStore[Any], owner: str, settings: Settings) -> Claimed:
    """Claim and load one batch of due events, in one transaction."""
    with store.begin() as tx:
        claims = store.claim(tx, owner, settings.batch_size, settings.lease_seconds)
        loaded = store.load_many(tx, claims)
    return Claimed(claims, loaded, time.monotonic())


def drain_once(
    rt: Runtime,
    owner: str | None = None,
    notify: Callable[[set[EndpointId]], None] | None = None,
    reg: Registry = registry,
    wake: Callable[[], None] | None = None,
    store: WorkStore[Any] | None = None,
    claimed: Claimed | None = None,
    prefetch: Executor | None = None,
) -> DrainResult:
    """Claim one batch of due events and run each; returns what became of them.

    ``claimed``: a batch claimed before (a previous call's ``next``) to run instead of
    claiming one; its leases are renewed a third of a lease after its claim, as any batch's.
    ``prefetch``: when the batch is full (more are likely due), the next batch is claimed
    on this executor while this one runs, so the worker does not wait on the claim between
    batches; it is the result's ``next``.

    ``store``: the event queue to claim from; by default the one behind ``rt``'s engine
    (unit tests give an in-memory one).

    ``wake`` is rung right after each commit that completed an event of a lane (an ordered
    source's business key): the lane's next event is due from that commit on, and the
    doorbell lets an idle worker process take it while this one goes on with its batch.

    Events whose playbook has no outside effects run in memory and complete together in
    one statement; events whose playbook has effects run in lockstep (``lockstep``: one
    commit per step for the whole batch); the rest (a claim per business key, ordered
    sources, callbacks from a pure playbook, a playbook missing) commit step by step
    through ``run_claimed``.
    """
    settings = rt.settings
    store = store if store is not None else work_store(rt.engine)
    owner = owner or worker_id()
    claimed = claimed or claim_batch(store, owner, settings)
    claims, loaded = claimed.claims, claimed.loaded
    # The leases' clock: renewals count from the claim, for a batch claimed ahead too.
    t_loaded = claimed.at
    result = DrainResult(claimed=len(claims))
    if prefetch is not None and len(claims) >= settings.batch_size:
        result.next = prefetch.submit(claim_batch, store, owner, settings)

    def advanced(n: int, more: bool) -> None:
        """``n`` events of lanes completed in the commit just made; ``more``: the batch
        still has work, so the doorbell lets another process take their next events now
        (at the batch's end the caller claims again at once: no ring is needed)."""
        if n:
            result.advanced += n
            if wake is not None and more:
                wake()

    cfg = run_config(settings)
    done: list[Completion] = []
    together: list[tuple[Claim, LoadedEvent, Playbook]] = []
    alone: list[tuple[Claim, LoadedEvent]] = []
    for idx, c in enumerate(claims):
        ev = loaded.get(c.id)
        if ev is None:
            result.states[RunInterrupted.LOST] += 1
            continue
        try:
            pb = reg.resolve(ev.tenant, ev.source, ev.event_type, ev.source_options.get("playbook"))
        except Exception:
            pb = None
        if pb is not None and not is_pure(pb) and lockstep.eligible(ev, pb):
            together.append((c, ev, pb))
            continue
        if pb is None or not is_pure(pb):
            alone.append((c, ev))
            continue
        with run_span(ev) as current:  # one span per attempt, in the event's trace
            completion = run_in_memory(ev, pb, c)
            if completion is None:
                state: str = run_claimed(
                    store, c, cfg, reg, notify=notify, ev=ev, on_retry=result.retry_in.append
                )
                result.states[state] += 1
                more = idx + 1 < len(claims) or bool(together or alone)
                advanced(int(state == EventState.COMPLETED and ev.opens_next), more)
            else:
                done.append(completion)
                state = completion.outcome
            tracing.set_attributes(current, {"inbox.outcome": state})
    advanced(
        _finish(store, done, loaded, result, time.monotonic() - t_loaded), bool(together or alone)
    )
    if together:
        lockstep.run_batch(
            store,
            together,
            cfg,
            result.states,
            lockstep.pool(settings.step_concurrency),
            notify=notify,
            on_retry=result.retry_in.append,
            clock=time.monotonic,
            advanced=lambda n, more: advanced(n, more or bool(alone)),
            since=t_loaded,
        )
    _run_alone(store, alone, settings, reg, notify, result, advanced, t_loaded)
    return result


def _run_alone(
    store: WorkStore[Any],
    alone: list[tuple[Claim, LoadedEvent]],
    settings: Settings,
    reg: Registry,
    notify: Callable[[set[EndpointId]], None] | None,
    result: DrainResult,
    advanced: Callable[[int, bool], None],
    renewed: float,
) -> None:
    """The batch's events that commit step by step, one after another (``run_claimed``)."""
    cfg = run_config(settings)
    for i, (c, ev) in enumerate(alone):
        if time.monotonic() - renewed > settings.lease_seconds / 3:
            # The rest of the batch is still waiting its turn: keep its leases.
            with store.begin() as tx:
                store.extend(tx, [x for x, _ in alone[i:]], settings.lease_seconds)
            renewed = time.monotonic()
        with run_span(ev) as current:  # one span per attempt, in the event's trace
            state = run_claimed(
                store, c, cfg, reg, notify=notify, ev=ev, on_retry=result.retry_in.append
            )
            result.states[state] += 1
            tracing.set_attributes(current, {"inbox.outcome": state})
        advanced(int(state == EventState.COMPLETED and ev.opens_next), i + 1 < len(alone))


def _finish(
    store: WorkStore[Any],
    done: list[Completion],
    loaded: dict[EventId, LoadedEvent],
    result: DrainResult,
    since_load: float,
) -> int:
    """Complete the events run in memory in one commit; how many of them had a lane."""
    if not done:
        return 0
    with store.begin() as tx:
        completed = store.complete_many(tx, done)
    lanes = sum(1 for x in done if x.claim.id in completed and loaded[x.claim.id].opens_next)
    for x in done:
        ev = loaded[x.claim.id]
        if x.claim.id in completed:
            result.states[EventState.COMPLETED] += 1
            latency = ev.age_seconds + since_load
            metrics.record_completed(ev.tenant, ev.source, latency, EventState.COMPLETED)
        else:
            result.states[RunInterrupted.LOST] += 1
    done.clear()
    return lanes


@dataclass(frozen=True)
class SweepResult:
    requeued: int
    quarantined: int
    due: int


def release_held(rt: Runtime, reg: Registry = registry) -> int:
    """Held events whose source's playbook this process has (or whose source no longer
    names one) become due again; returns how many."""
    with rt.engine.begin() as conn:
        sources = queue_reads.held_playbooks(conn)
        ready = [sid for sid, name in sources.items() if name is None or name in reg.by_name]
        released = queue.release_held(conn, ready)
    metrics.record_released(released)
    return released


def sweep_once(db: Engine | WorkStore[Any]) -> SweepResult:
    """The lifeline: expired leases go back to the queue; report how much is due."""
    store = work_store(db)
    with store.begin() as tx:
        requeued, quarantined = store.sweep_expired(tx)
        due = store.due_count(tx)
    metrics.record_sweep(requeued, quarantined)
    return SweepResult(requeued, quarantined, due)
