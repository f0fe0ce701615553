"""A replay's preview: what replaying these events would do, step by step, doing none of it.

For each event the planner follows the runner (``inbox.services.runner``) without
running a step: a step with a recovery point is skipped; a ``skip_if_stale`` step of
an event older than the newest completed event with its business key is stopped by
the stale guard; a ``once_per_business_key`` step whose effect another event owns is
stopped by the business-key guard (an earlier event of the same preview that would
claim it counts too, in the order a bulk replay runs them); every other step runs, and
the callbacks it declares (``Step.sends``) go to the tenant's endpoints that take their
type and whose filter is true (judged on the event's payload, which is what a step that
forwards it sends), marked with the event's next replay number and with what the outbox
would do: ``sent``, ``waits`` (its circuit is open), ``held`` (paused or disabled: written,
sent when it is enabled) or ``filtered`` (not written, so not counted as a callback). A
step that declares nothing is listed as running with its callbacks unknown. An event is
replayable in the states ``inbox replay`` replays (quarantined, filtered).

The planning (``plan_event``) is pure; ``preview`` reads its inputs through the
store's read model and writes nothing. ``audit`` writes the one audit row a preview
leaves.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Connection

from inbox.domain import ordering
from inbox.domain.bodyschema import check_body
from inbox.domain.callbacks import Route, route
from inbox.domain.errors import InboxError
from inbox.domain.ordering import Position
from inbox.domain.playbooks import EVENT_TYPE, Playbook, Registry, registry
from inbox.domain.records import BulkJobId, TenantId
from inbox.domain.states import REPLAYABLE
from inbox.store.reads import events as event_reads
from inbox.store.reads import listing
from inbox.store.reads import preview as reads
from inbox.store.write import operator

# What a step would do.
SKIP, RUN, STALE, DUPLICATE = "skip", "run", "stale", "duplicate_fact"
ACTIONS = (SKIP, RUN, STALE, DUPLICATE)
HELD, FILTERED = "held", "filtered"  # what the outbox does with a callback, but "sent"
# More events than this are counted, not planned one by one.
MAX_PLANNED = 1000


@dataclass(frozen=True)
class StepPlan:
    name: str
    action: str  # one of ACTIONS
    why: str
    # For a step that runs: the callback types it declares (None: it does not say).
    sends: list[str] | None = None


@dataclass(frozen=True)
class CallbackPlan:
    step: str
    event_type: str
    endpoint: str
    replay: int  # the webhook-replay number it would carry
    delivery: str = "sent"  # sent | waits (open circuit) | held | filtered (never written)


@dataclass(frozen=True)
class EventPlan:
    event: str
    replayable: bool
    playbook: str | None = None
    outcome: str | None = None  # completed, stale, duplicate_fact, failed
    problem: str | None = None  # why it would not replay, or would fail at once
    steps: list[StepPlan] = field(default_factory=list)
    callbacks: list[CallbackPlan] = field(default_factory=list)


@dataclass(frozen=True)
class Preview:
    events: list[EventPlan]
    matched: int  # events the request names or matches
    more: bool = False  # it matches more than MAX_PLANNED: the rest are not planned

    @property
    def totals(self) -> dict[str, int]:
        counts = dict.fromkeys(
            (
                "events",
                "replayable",
                "not_replayable",
                *ACTIONS,
                "callbacks",
                "unknown_callbacks",
                "callbacks_held",
                "callbacks_filtered",
            ),
            0,
        )
        counts["events"] = len(self.events)
        for ev in self.events:
            counts["replayable" if ev.replayable else "not_replayable"] += 1
            for st in ev.steps:
                counts[st.action] += 1
                if st.action == RUN and st.sends is None:
                    counts["unknown_callbacks"] += 1
            for cb in ev.callbacks:
                if cb.delivery == FILTERED:
                    counts["callbacks_filtered"] += 1
                    continue
                counts["callbacks"] += 1  # a delivery row, whatever the endpoint's state
                counts["callbacks_held"] += cb.delivery == HELD
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": True,
            "matched": self.matched,
            "more": self.more,
            "planned": len(self.events),
            "totals": self.totals,
            "events": [asdict(e) for e in self.events],
        }


@dataclass(frozen=True)
class Inputs:
    """What the guards would see, read beforehand."""

    newer: reads.Newest | None
    # Step name → the public id of the other event that owns its effect.
    owners: dict[str, str]
    endpoints: list[reads.EndpointRow]
    payload: Any = None  # the event's parsed body: what a forwarding step sends


def load_playbooks(modules: tuple[str, ...]) -> Registry:
    """The registry with INBOX_PLAYBOOKS imported, as the workers have it."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise InboxError(f"playbook module {module!r} cannot be imported: {exc}") from exc
    return registry


def _position(ev: reads.PlannedEvent) -> Position | None:
    if not ordering.configured(ev.source_options) or ev.business_key_digest is None:
        return None
    try:
        return ordering.position_of(ev.source_options, json.loads(ev.body or b""))
    except (ValueError, InboxError):
        return None  # the runner fails such an event; check_body or the step says why


def _delivery(ep: reads.EndpointRow, event_type: str, payload: Any) -> str | None:
    """What the outbox would do with this callback for this endpoint (None: nothing, the
    endpoint is not subscribed to its type)."""
    way = route(ep, event_type, payload)
    if way is Route.UNSUBSCRIBED:
        return None
    if way is Route.FILTERED:
        return FILTERED
    if not ep.sends:
        return HELD
    return "waits" if ep.circuit != "closed" else "sent"


def _payload(ev: reads.PlannedEvent) -> Any:
    try:
        return json.loads(ev.body or b"")
    except ValueError:
        return None


def plan_event(ev: reads.PlannedEvent, pb: Playbook, inputs: Inputs) -> EventPlan:
    """The steps and callbacks of one replayable event (pure)."""
    mine = _position(ev)
    newer = inputs.newer
    stale = (
        newer is not None
        and mine is not None
        and Position(newer.occurred_at, newer.version).newer_than(mine)
    )
    steps: list[StepPlan] = []
    callbacks: list[CallbackPlan] = []
    outcome = "completed"
    for step in pb.steps:
        if step.name in ev.steps:
            steps.append(StepPlan(step.name, SKIP, "recovery point already committed"))
            continue
        if stale and step.skip_if_stale and newer is not None:
            steps.append(StepPlan(step.name, STALE, f"newer event {newer.public_id} completed"))
            continue
        owner = inputs.owners.get(step.name)
        if step.once_per_business_key and ev.business_key_digest is not None and owner:
            outcome = DUPLICATE
            steps.append(StepPlan(step.name, DUPLICATE, f"event {owner} owns this effect"))
            continue
        sends = None
        if step.sends is not None:
            own = ev.event_type or "event"
            sends = [own if t == EVENT_TYPE else t for t in step.sends]
            for index_type in sends:
                for ep in inputs.endpoints:
                    way = _delivery(ep, index_type, inputs.payload)
                    if way is not None:
                        callbacks.append(
                            CallbackPlan(step.name, index_type, ep.public_id, ev.replay + 1, way)
                        )
        steps.append(StepPlan(step.name, RUN, "no recovery point", sends))
    return EventPlan(
        ev.public_id,
        True,
        pb.name,
        "stale" if stale else outcome,
        None,
        steps,
        callbacks,
    )


def _refusal(ev: reads.PlannedEvent) -> str | None:
    if ev.state not in REPLAYABLE:
        return f"{ev.state}: only a quarantined or filtered event is replayed"
    if ev.body is None:
        return "its body is past retention: nothing is left to run"
    return None


_Claimed = dict[tuple[int, str, bytes], str]


def _owners(
    conn: Connection, ev: reads.PlannedEvent, pb: Playbook, claimed: _Claimed
) -> dict[str, str]:
    """The once-per-business-key steps another event owns (or an earlier one would claim)."""
    owners: dict[str, str] = {}
    bk = ev.business_key_digest
    for step in pb.steps:
        if not step.once_per_business_key or bk is None or step.name in ev.steps:
            continue
        name = f"{pb.name}.{step.name}"
        owner = reads.effect_owner(conn, ev.tenant_id, name, bk)
        if owner is not None and owner[0] != ev.id:
            owners[step.name] = owner[1]
        elif owner is None and (ev.tenant_id, name, bk) in claimed:
            owners[step.name] = claimed[(ev.tenant_id, name, bk)]
    return owners


def _claim(ev: reads.PlannedEvent, pb: Playbook, plan: EventPlan, claimed: _Claimed) -> None:
    """The effects this event's replay would claim, for the events planned after it."""
    if ev.business_key_digest is None:
        return
    once = {s.name for s in pb.steps if s.once_per_business_key}
    for st in plan.steps:
        if st.action == RUN and st.name in once:
            key = (ev.tenant_id, f"{pb.name}.{st.name}", ev.business_key_digest)
            claimed.setdefault(key, ev.public_id)


def preview(conn: Connection, public_ids: list[str], reg: Registry = registry) -> Preview:
    """Plan the replay of the named events (oldest first); reads only."""
    planned: list[EventPlan] = []
    claimed: _Claimed = {}  # effects earlier events would claim
    endpoints: dict[int, list[reads.EndpointRow]] = {}
    for ev in reads.events(conn, public_ids[:MAX_PLANNED]):
        refusal = _refusal(ev)
        if refusal is not None:
            planned.append(EventPlan(ev.public_id, False, problem=refusal))
            continue
        try:
            pb = reg.resolve(ev.tenant, ev.source, ev.event_type, ev.source_options.get("playbook"))
            check_body(ev.source_options.get("body_schema") or {}, ev.body or b"", ev.content_type)
        except InboxError as exc:
            planned.append(EventPlan(ev.public_id, True, outcome="failed", problem=exc.message))
            continue
        bk = ev.business_key_digest
        owners = _owners(conn, ev, pb, claimed)
        mine = _position(ev)
        newer = None
        if mine is not None and bk is not None:
            by_time = mine.occurred_at is not None
            newer = reads.newest_completed(conn, ev.tenant_id, bk, ev.id, by_time)
        if ev.tenant_id not in endpoints:
            endpoints[ev.tenant_id] = reads.endpoints(conn, ev.tenant_id)
        inputs = Inputs(newer, owners, endpoints[ev.tenant_id], _payload(ev))
        plan = plan_event(ev, pb, inputs)
        _claim(ev, pb, plan, claimed)
        planned.append(plan)
    return Preview(planned, len(public_ids), more=len(public_ids) > MAX_PLANNED)


def preview_filter(
    conn: Connection,
    scope: TenantId | None,
    match: listing.Filter,
    reg: Registry = registry,
) -> Preview:
    """Plan the replay of the dead letters a bulk replay's filter matches."""
    rows = event_reads.list_events(conn, scope, match, MAX_PLANNED + 1, None)
    found = preview(conn, [r.public_id for r in rows], reg)
    return Preview(found.events, min(len(rows), MAX_PLANNED), more=found.more)


def audit(conn: Connection, actor: str, result: Preview, **about: Any) -> None:
    """The preview's audit line: who previewed what, and the totals they saw."""
    detail = {**about, "matched": result.matched, "more": result.more, "totals": result.totals}
    operator.audit_preview(conn, actor, detail)


def preview_job(conn: Connection, job_id: BulkJobId, reg: Registry = registry) -> Preview:
    """Plan a bulk replay job's snapshotted events (what its approver is asked to run)."""
    ids = reads.job_items(conn, job_id, MAX_PLANNED + 1)
    return preview(conn, ids, reg)
