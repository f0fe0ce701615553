"""The inbox audits itself: its invariants checked, loudly, with repair behind approval.

``run`` checks invariants (``inbox.domain.invariants``) and records what it finds
(``inbox.store.write.audit``): beat runs an incremental pass every minute (each check reads
the rows new since its watermark, and every unfinished row) and a full pass every few
hours, which walks the ledger a day at a time in short transactions and goes on where an
unfinished walk stopped; ``inbox audit`` runs either on demand, or from a time. Every
violation a pass opens is counted (``inbox_invariant_violations_total{invariant}``) and
logged as an ERROR line with its rows' ids and the event's trace id; the open ones are a
gauge read at scrape time.

A repair (``propose``, then ``review`` by a second operator) exists only where it cannot
double an effect: reclaiming expired leases is the sweep's own statement (fencing keeps a
late worker from committing), a missing delivery is written held from its callback intent
(never sent by the repair: an operator releases it), and a lane block whose event no
longer blocks it is removed (what quarantine's end does). After it runs the invariant is
checked again, and the result kept with the repair.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine

from inbox.domain.errors import BadRequest
from inbox.domain.invariants import (
    MEANING,
    NO_DELIVERY,
    Found,
    Invariant,
    RepairKind,
    RepairStatus,
    check_approver,
    lease_bound_seconds,
    repair_available,
    repair_of,
)
from inbox.domain.records import EventId, TenantId
from inbox.infra import metrics
from inbox.services.runtime import Runtime
from inbox.store.reads import invariants as checks
from inbox.store.write import audit as store
from inbox.store.write import deliveries, intents, queue, repairs
from inbox.store.write.audit import NotAwaitingReview, Repair, RepairNotFound

log = logging.getLogger(__name__)


@dataclass
class Checked:
    """One invariant's pass: what it found, what that opened and resolved, its cost."""

    invariant: Invariant
    found: list[Found]
    opened: int
    resolved: int
    seconds: float
    since: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant.value,
            "meaning": MEANING[self.invariant],
            "holds": not self.found,
            "violations": [f.to_dict() for f in self.found],
            "opened": self.opened,
            "resolved": self.resolved,
            "seconds": round(self.seconds, 4),
            "since_id": self.since,
        }


@dataclass
class Report:
    mode: str
    checked: list[Checked] = field(default_factory=list)
    pruned_intents: int = 0  # callback intents of dropped days, deleted by a full pass

    @property
    def violations(self) -> int:
        return sum(len(c.found) for c in self.checked)

    @property
    def seconds(self) -> float:
        return sum(c.seconds for c in self.checked)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "holds": self.violations == 0,
            "violations": self.violations,
            "seconds": round(self.seconds, 4),
            "invariants": [c.to_dict() for c in self.checked],
        }


def run(
    rt: Runtime,
    invariants: list[Invariant] | None = None,
    *,
    full: bool = False,
    since: dt.datetime | None = None,
    resume: bool = False,
) -> Report:
    """Check ``invariants`` (default: all): a full pass, a pass from ``since``, or (neither)
    an incremental pass from each one's watermark, which it then advances.

    A full pass (and one from ``since``) walks each table it scans a slice at a time (a
    day of the ledger), each slice in a short transaction of its own; ``resume`` (beat's
    full pass) goes on with the walk a previous one left unfinished."""
    if full and since is not None:
        raise BadRequest("a full pass reads everything: give no time to start from")
    mode = "full" if full else ("since" if since is not None else "incremental")
    report = Report(mode)
    engine = rt.engine
    bound = lease_bound_seconds(rt.settings.sweep_seconds)
    for invariant in invariants or list(Invariant):
        table = checks.SCANS[invariant]
        if table is not None and mode != "incremental":
            report.checked.append(_walk(engine, invariant, table, since, bound, resume and full))
        else:
            report.checked.append(_check_one(engine, invariant, mode, bound))
    if full:
        with engine.begin() as conn:
            store.allow_long(conn)
            report.pruned_intents = intents.prune(conn)
    return report


def _check_one(engine: Engine, invariant: Invariant, mode: str, bound: float) -> Checked:
    """An incremental pass (from the watermark), or a check that reads every row it covers
    (few: leases, partitions, holds), in one transaction."""
    table = checks.SCANS[invariant]
    started = time.monotonic()
    with engine.begin() as conn:
        store.allow_long(conn)
        floor = queue.floor(conn)
        start = store.watermark(conn, invariant) if table is not None else 0
        highest = checks.highest_id(conn, table, floor) if table is not None else 0
        found = checks.check(conn, invariant, checks.Scope(start, floor, bound))
        # Only a pass over everything the invariant covers may say a violation is gone.
        recorded = store.record(conn, invariant, found, whole=(table is None or start == 0))
        if table is not None:
            store.advance(conn, invariant, highest, full=start == 0)
    seconds = time.monotonic() - started
    _loud(invariant, recorded.opened, seconds)
    return Checked(invariant, found, len(recorded.opened), recorded.resolved, seconds, start)


def _walk(
    engine: Engine,
    invariant: Invariant,
    table: str,
    since: dt.datetime | None,
    bound: float,
    resume: bool,
) -> Checked:
    """A pass over ``table`` (all of it, or from ``since``) a slice at a time: each day of
    the ledger (each ``INTENT_SLICE`` intents) checked and recorded in a transaction of its
    own, so no statement reads, holds or locks more than a day; then the parts that are not
    sliced. A full walk resolves, at its end, the violations no pass saw since it began."""
    started = time.monotonic()
    found: list[Found] = []
    opened = resolved = 0
    with engine.begin() as conn:
        began, at = store.walk_begin(conn, invariant, resume)
        if since is not None:
            at = checks.first_id_since(conn, table, since)
        start = at
        highest = checks.highest_id(conn, table, queue.floor(conn))
    while True:
        with engine.begin() as conn:
            store.allow_long(conn)
            if resume:
                mark = store.walk_at(conn, invariant)
                if mark is None:  # another walker finished it meanwhile
                    break
                at = mark
            piece = checks.next_slice(conn, table, at)
            if piece is None:
                break
            lo, hi = piece
            scope = checks.Scope(lo, checks.NO_ID, bound, until=hi, extras=False)
            got = checks.check(conn, invariant, scope)
            recorded = store.record(conn, invariant, got, whole=False)
            if resume:
                store.walk_to(conn, invariant, hi)
        at = hi
        found += got
        opened += len(recorded.opened)
        _loud(invariant, recorded.opened, 0.0)
    with engine.begin() as conn:
        store.allow_long(conn)
        extras = checks.Scope(checks.NO_ID, checks.NO_ID, bound, until=checks.NO_ID)
        got = checks.check(conn, invariant, extras)
        recorded = store.record(conn, invariant, got, whole=False)
        if since is None:
            resolved = store.resolve_unseen(conn, invariant, began)
            if resume:
                store.walk_end(conn, invariant)
            store.advance(conn, invariant, highest, full=True)
    found += got
    opened += len(recorded.opened)
    seconds = time.monotonic() - started
    _loud(invariant, recorded.opened, seconds)
    return Checked(invariant, found, opened, resolved, seconds, start)


def _loud(invariant: Invariant, opened: list[tuple[int, Found]], seconds: float) -> None:
    """Count what a check opened and what it cost; one ERROR line per new violation."""
    metrics.record_invariant_check(invariant.value, len(opened), seconds)
    for violation_id, f in opened:
        log.error(
            "invariant %s violated: %s (%s); inbox audit shows its rows, violation %s",
            invariant.value,
            f.subject,
            _problem(f),
            violation_id,
            extra=_fields(violation_id, f),
        )


def _problem(f: Found) -> str:
    for row in f.rows:
        if isinstance(row, dict) and row.get("problem"):
            return str(row["problem"])
    return MEANING[Invariant(f.invariant)]


def _fields(violation_id: int, f: Found) -> dict[str, object]:
    """A violation's log fields: its ids, never a body or a secret."""
    out: dict[str, object] = {
        "invariant": f.invariant,
        "violation_id": violation_id,
        "subject": f.subject,
        "rows": [
            {k: v for k, v in row.items() if k in _ROW_IDS}
            for row in f.rows
            if isinstance(row, dict)
        ],
    }
    if f.trace_id:
        out["trace_id"] = f.trace_id
    return out


_ROW_IDS = frozenset(
    {"table", "id", "public_id", "event_id", "endpoint_id", "state", "name", "problem",
     "partition", "event_public_id"}
)  # fmt: skip


# Repairs ---------------------------------------------------------------------------------


def propose(rt: Runtime, actor: str, violation_id: int) -> Repair:
    """Propose the safe repair of an open violation, with a preview of what it will do."""
    with rt.engine.begin() as conn:
        found = checks.violation(conn, violation_id)
        if found is None or found.resolved_at is not None:
            raise RepairNotFound(f"no open violation {violation_id}")
        kind = repair_of(found.invariant, found.subject, found.rows)
        if kind is None:
            raise BadRequest(
                f"{found.invariant} ({found.subject}) has no safe repair: any automatic change"
                " could double an effect; investigate the rows it names"
            )
        if not repair_available(kind):
            raise BadRequest(f"{kind.value} is not available in this version")
        preview = _preview(conn, kind, found.rows)
        return store.propose(conn, violation_id, kind, preview, actor)


def _preview(conn: Connection, kind: RepairKind, rows: list[dict[str, Any]]) -> dict[str, Any]:
    if kind is RepairKind.RECLAIM_LEASES:
        return {
            "will": "run the sweep's reclaim now: every expired lease goes back to be"
            " claimed again (or to quarantine when out of attempts); a late worker's"
            " commit is refused by its fence",
            "leases": [
                {k: r.get(k) for k in ("table", "public_id", "lease_owner", "lease_expires_at")}
                for r in rows
                if r.get("table") in ("events", "deliveries")
            ],
        }
    if kind is RepairKind.WRITE_HELD_DELIVERY:
        return _held_delivery_preview(conn, rows)
    return _lane_preview(rows)


def _missing(rows: list[dict[str, Any]]) -> list[str]:
    """The webhook-ids of the intents a delivery violation names with no delivery."""
    return [
        str(r["public_id"])
        for r in rows
        if r.get("table") == "callback_intents" and r.get("problem") == NO_DELIVERY
    ]


def _held_delivery_preview(conn: Connection, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Which endpoint, which intent, and the delivery written (held; its body's digest,
    never the body). Refused when the intent cannot give the delivery's body."""
    planned = []
    for public_id in _missing(rows):
        kept = repairs.intent(conn, public_id)
        if kept is None:
            raise BadRequest(f"the callback intent {public_id} is gone: nothing to write from")
        if not kept.kept:
            raise BadRequest(
                f"the callback intent {public_id} was recorded before intents kept their"
                " delivery's body: nothing to write the delivery from; replay the event's"
                " callback instead"
            )
        if kept.erased:
            raise BadRequest(
                f"the payload of callback intent {public_id} was erased (its data key is"
                " destroyed): there is no body to write the delivery from"
            )
        if kept.endpoint_public_id is None:
            raise BadRequest(f"the endpoint of callback intent {public_id} was deleted")
        planned.append(
            {
                "endpoint": {
                    "id": kept.endpoint_id,
                    "public_id": kept.endpoint_public_id,
                    "enabled": kept.endpoint_enabled,
                    "paused": kept.endpoint_paused,
                },
                "intent": {
                    "public_id": kept.public_id,
                    "event_id": kept.event_id,
                    "event_public_id": kept.event_public_id,
                    "step": kept.step,
                    "event_type": kept.event_type,
                    "created_at": kept.created_at,
                },
                "delivery": kept.delivery_preview(),
            }
        )
    return {
        "will": "write the missing delivery as held, from its callback intent: nothing is"
        " sent until an operator releases it (inbox endpoints resume <endpoint>)",
        "deliveries": planned,
    }


def _lane_preview(rows: list[dict[str, Any]]) -> dict[str, Any]:
    blocks = [r for r in rows if r.get("table") == "lane_blocks"]
    return {
        "will": "remove the lane's block, whose event no longer blocks it: the lane's next"
        " event is claimed at the next sweep, in order",
        "blocks": [
            {k: b.get(k) for k in ("tenant_id", "lane", "event_id", "since", "waiting", "problem")}
            for b in blocks
        ],
        "events": [
            {k: r.get(k) for k in ("public_id", "state", "finished_at")}
            for r in rows
            if r.get("table") == "events"
        ],
    }


def review(rt: Runtime, actor: str, public_id: str, approve: bool) -> Repair:
    """Reject a proposed repair, or approve it: a second operator's approval applies it,
    both audited; then the invariant is checked again (a full pass of it) and whether the
    violation is gone is kept with the repair and audited too."""
    with rt.engine.begin() as conn:
        repair = store.get(conn, public_id, lock=True)  # two reviewers: one at a time
        if not approve:
            return store.review(conn, public_id, actor, False, {})
        check_approver(repair.proposed_by, actor)
        if repair.status != RepairStatus.AWAITING_APPROVAL:
            raise NotAwaitingReview()
        violation = checks.violation(conn, repair.violation_id)
        assert violation is not None  # the repair's foreign key
        done = _apply(conn, RepairKind(repair.kind), repair.preview)
        applied = store.review(conn, public_id, actor, True, {"done": done})
    after = run(rt, [Invariant(violation.invariant)], full=True)
    still = [f for f in after.checked[0].found if f.subject == violation.subject]
    result = {"done": done, "checked_after": True, "holds_after": not still}
    with rt.engine.begin() as conn:
        return store.checked(conn, applied, actor, result)


def _apply(conn: Connection, kind: RepairKind, preview: dict[str, Any]) -> dict[str, Any]:
    """Carry the approved repair out, as its preview said; what it did."""
    if kind is RepairKind.RECLAIM_LEASES:
        requeued, quarantined = queue.sweep_expired(conn)
        deliveries.sweep(conn)
        return {"requeued": requeued, "quarantined": quarantined}
    if kind is RepairKind.WRITE_HELD_DELIVERY:
        written: list[str] = []
        present: list[str] = []
        for planned in preview.get("deliveries", []):
            public_id = str(planned["intent"]["public_id"])
            kept = repairs.intent(conn, public_id)
            made = None if kept is None else repairs.write_held(conn, kept)
            (written if made is not None else present).append(public_id)
        return {"written_held": written, "not_written": present}
    released = []
    for block in preview.get("blocks", []):
        event_id = EventId(int(block["event_id"]))
        tenant_id = TenantId(int(block["tenant_id"]))
        if repairs.release_lane(conn, tenant_id, str(block["lane"]), event_id):
            released.append(event_id)
    return {"released": released}


def open_violations(rt: Runtime, invariant: str | None = None) -> list[checks.Violation]:
    with rt.engine.connect() as conn:
        return checks.open_violations(conn, invariant)


def pending_repairs(rt: Runtime) -> list[checks.PendingRepair]:
    with rt.engine.connect() as conn:
        return checks.pending_repairs(conn)
