"""The inbox audits itself: its invariants checked, loudly, with repair behind approval.

``run`` checks invariants (``inbox.domain.invariants``) and records what it finds
(``inbox.store.write.audit``): beat runs an incremental pass every minute (each check reads
the rows new since its watermark, and every unfinished row) and a full pass every few
hours; ``inbox audit`` runs either on demand, or from a time. Every violation a pass opens
is counted (``inbox_invariant_violations_total{invariant}``) and logged as an ERROR line
with its rows' ids and the event's trace id; the open ones are a gauge read at scrape time.

A repair (``propose``, then ``review`` by a second operator) exists only where it cannot
double an effect: reclaiming expired leases is the sweep's own statement (fencing keeps a
late worker from committing), and a missing delivery is written held, never sent by the
repair. After it runs the invariant is checked again, and the result kept with the repair.
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
    REPAIRS,
    Found,
    Invariant,
    RepairKind,
    RepairStatus,
    check_approver,
    lease_bound_seconds,
    repair_available,
)
from inbox.infra import metrics
from inbox.infra.config import Settings
from inbox.store.reads import invariants as checks
from inbox.store.write import audit as store
from inbox.store.write import deliveries, intents, queue
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
    engine: Engine,
    settings: Settings,
    invariants: list[Invariant] | None = None,
    *,
    full: bool = False,
    since: dt.datetime | None = None,
) -> Report:
    """Check ``invariants`` (default: all): a full pass, a pass from ``since``, or (neither)
    an incremental pass from each one's watermark, which it then advances."""
    if full and since is not None:
        raise BadRequest("a full pass reads everything: give no time to start from")
    mode = "full" if full else ("since" if since is not None else "incremental")
    report = Report(mode)
    bound = lease_bound_seconds(settings.sweep_seconds)
    for invariant in invariants or list(Invariant):
        report.checked.append(_check_one(engine, invariant, mode, since, bound))
    if full:
        with engine.begin() as conn:
            store.allow_long(conn)
            report.pruned_intents = intents.prune(conn)
    return report


def _check_one(
    engine: Engine, invariant: Invariant, mode: str, since: dt.datetime | None, bound: float
) -> Checked:
    table = checks.SCANS[invariant]
    started = time.monotonic()
    with engine.begin() as conn:
        store.allow_long(conn)
        floor = queue.floor(conn)
        start = 0
        if table is not None and mode == "incremental":
            start = store.watermark(conn, invariant)
        elif table is not None and since is not None:
            start = checks.first_id_since(conn, table, since)
        highest = checks.highest_id(conn, table, floor) if table is not None else 0
        found = checks.check(conn, invariant, checks.Scope(start, floor, bound))
        # Only a pass over everything the invariant covers may say a violation is gone.
        recorded = store.record(conn, invariant, found, whole=(table is None or start == 0))
        if table is not None and mode != "since":  # a full pass read everything too
            store.advance(conn, invariant, highest, full=start == 0)
    seconds = time.monotonic() - started
    metrics.record_invariant_check(invariant.value, len(recorded.opened), seconds)
    for violation_id, f in recorded.opened:
        log.error(
            "invariant %s violated: %s (%s); inbox audit shows its rows, violation %s",
            invariant.value,
            f.subject,
            _problem(f),
            violation_id,
            extra=_fields(violation_id, f),
        )
    return Checked(invariant, found, len(recorded.opened), recorded.resolved, seconds, start)


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


def propose(engine: Engine, settings: Settings, actor: str, violation_id: int) -> Repair:
    """Propose the safe repair of an open violation, with a preview of what it will do."""
    with engine.begin() as conn:
        found = checks.violation(conn, violation_id)
        if found is None or found.resolved_at is not None:
            raise RepairNotFound(f"no open violation {violation_id}")
        kind = REPAIRS.get(Invariant(found.invariant))
        if kind is None:
            raise BadRequest(
                f"{found.invariant} has no safe repair: any automatic change could double an"
                " effect; investigate the rows it names"
            )
        if not repair_available(kind):
            raise BadRequest(
                f"{kind.value} is not available in this version: a callback intent keeps no"
                " body to write the missing delivery from; it is listed, not written"
            )
        preview = _preview(kind, found.rows, settings)
        return store.propose(conn, violation_id, kind, preview, actor)


def _preview(kind: RepairKind, rows: list[dict[str, Any]], settings: Settings) -> dict[str, Any]:
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
    return {
        "will": "write the missing delivery as held: it is not sent until an operator releases it",
        "intents": [r for r in rows if r.get("table") == "callback_intents"],
    }


def review(engine: Engine, settings: Settings, actor: str, public_id: str, approve: bool) -> Repair:
    """Reject a proposed repair, or approve it: a second operator's approval applies it,
    both audited; then the invariant is checked again (a full pass of it) and whether the
    violation is gone is kept with the repair and audited too."""
    with engine.begin() as conn:
        repair = store.get(conn, public_id, lock=True)  # two reviewers: one at a time
        if not approve:
            return store.review(conn, public_id, actor, False, {})
        check_approver(repair.proposed_by, actor)
        if repair.status != RepairStatus.AWAITING_APPROVAL:
            raise NotAwaitingReview()
        violation = checks.violation(conn, repair.violation_id)
        done = _apply(conn, RepairKind(repair.kind))
        applied = store.review(conn, public_id, actor, True, {"done": done})
    assert violation is not None  # the repair's foreign key
    after = run(engine, settings, [Invariant(violation.invariant)], full=True)
    still = [f for f in after.checked[0].found if f.subject == violation.subject]
    result = {"done": done, "checked_after": True, "holds_after": not still}
    with engine.begin() as conn:
        return store.checked(conn, applied, actor, result)


def _apply(conn: Connection, kind: RepairKind) -> dict[str, int]:
    if kind is RepairKind.RECLAIM_LEASES:
        requeued, quarantined = queue.sweep_expired(conn)
        deliveries.sweep(conn)
        return {"requeued": requeued, "quarantined": quarantined}
    raise BadRequest(f"{kind.value} cannot be applied by this version")


def open_violations(engine: Engine, invariant: str | None = None) -> list[checks.Violation]:
    with engine.connect() as conn:
        return checks.open_violations(conn, invariant)


def pending_repairs(engine: Engine) -> list[checks.PendingRepair]:
    with engine.connect() as conn:
        return checks.pending_repairs(conn)
