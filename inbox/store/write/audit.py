"""The self-audit's writes: violations opened and resolved, watermarks, repairs reviewed.

A violation is one row per (invariant, subject) while open (a partial unique index): a
pass that finds it again refreshes its rows and ``last_seen_at``; a pass that covers the
whole invariant and no longer finds it resolves it. Repairs follow the two-person rule of
bulk replays (``inbox.store.write.bulk_review``): the state test is in the UPDATE, so two
reviewers at once are serialised by the row lock and the second finds it reviewed (409);
every proposal and review is audited with both names.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.errors import InboxError
from inbox.domain.invariants import Found, Invariant, RepairKind, RepairStatus, check_approver

STATEMENT_TIMEOUT_MS = 300_000  # a full pass reads the whole ledger, off the hot path


def allow_long(conn: Connection) -> None:
    """This transaction's statements may run as long as a full pass needs."""
    conn.execute(
        text("SELECT set_config('statement_timeout', :ms, true)"),
        {"ms": str(STATEMENT_TIMEOUT_MS)},
    )


def watermark(conn: Connection, invariant: Invariant) -> int:
    """Where this incremental pass of ``invariant`` reads from (0 before its first pass)."""
    return int(
        conn.execute(
            text(
                "INSERT INTO invariant_watermarks (invariant) VALUES (:i)"
                " ON CONFLICT (invariant) DO UPDATE SET invariant = EXCLUDED.invariant"
                " RETURNING since_id"
            ),
            {"i": invariant.value},
        ).scalar_one()
    )


# An incremental pass re-reads the last sixth of the rows the previous pass read: those
# written in the last ~10 s before it (at beat's 60 s), so a row whose transaction was
# still open then (a hot-path transaction lasts milliseconds) is read once it committed.
OVERLAP_DIVISOR = 6


def next_since(previous_next: int, highest_plus_one: int) -> int:
    """Where the next incremental pass starts: a sixth of the last interval before the
    highest id this pass saw; after a first pass (or across a ledger day, whose ids do not
    continue the previous day's), at that highest id."""
    h = highest_plus_one
    if previous_next <= 0 or previous_next >= h or (previous_next >> 40) != (h >> 40):
        return h
    return h - (h - previous_next) // OVERLAP_DIVISOR


def advance(conn: Connection, invariant: Invariant, highest: int, full: bool) -> None:
    """After a pass that saw ids up to ``highest``: where the next one starts (``next_since``).
    A full pass moves it too: it read everything."""
    previous = conn.execute(
        text("SELECT next_id FROM invariant_watermarks WHERE invariant = :i FOR UPDATE"),
        {"i": invariant.value},
    ).scalar()
    h = highest + 1
    since = next_since(int(previous or 0), h)
    conn.execute(
        text(
            "INSERT INTO invariant_watermarks AS w (invariant, since_id, next_id, checked_at,"
            " full_at) VALUES (:i, :s, :h, now(), CASE WHEN :full THEN now() END)"
            " ON CONFLICT (invariant) DO UPDATE SET since_id = :s, next_id = :h,"
            " checked_at = now(), full_at = CASE WHEN :full THEN now() ELSE w.full_at END"
        ),
        {"i": invariant.value, "s": since, "h": h, "full": full},
    )


# Beat's full pass walks each table a slice at a time, each slice in a transaction of its
# own, and goes on where it stopped (a worker killed, a deploy): ``full_next`` is where,
# ``full_started_at`` when the walk under way began. Each slice locks the invariant's row,
# so two walkers at once take turns, slice by slice, and never walk a slice twice.


def walk_begin(conn: Connection, invariant: Invariant, resume: bool) -> tuple[dt.datetime, int]:
    """When the walk began and where it goes on: the walk under way (``resume``), or a new
    one from now, at 0 (recorded as under way when ``resume``)."""
    if not resume:
        return conn.execute(text("SELECT now()")).scalar_one(), 0
    watermark(conn, invariant)  # the row exists
    row = conn.execute(
        text(
            "SELECT full_next, full_started_at FROM invariant_watermarks WHERE invariant = :i"
            " FOR UPDATE"
        ),
        {"i": invariant.value},
    ).one()
    if row.full_next is not None and row.full_started_at is not None:
        return row.full_started_at, int(row.full_next)
    began = conn.execute(
        text(
            "UPDATE invariant_watermarks SET full_next = 0, full_started_at = now()"
            " WHERE invariant = :i RETURNING full_started_at"
        ),
        {"i": invariant.value},
    ).scalar_one()
    return began, 0


def walk_at(conn: Connection, invariant: Invariant) -> int | None:
    """Where the walk under way goes on, its row locked until this slice commits; None
    when another walker finished it meanwhile."""
    found = conn.execute(
        text("SELECT full_next FROM invariant_watermarks WHERE invariant = :i FOR UPDATE"),
        {"i": invariant.value},
    ).scalar()
    return None if found is None else int(found)


def walk_to(conn: Connection, invariant: Invariant, at: int) -> None:
    conn.execute(
        text("UPDATE invariant_watermarks SET full_next = :at WHERE invariant = :i"),
        {"i": invariant.value, "at": at},
    )


def walk_end(conn: Connection, invariant: Invariant) -> None:
    conn.execute(
        text(
            "UPDATE invariant_watermarks SET full_next = NULL, full_started_at = NULL"
            " WHERE invariant = :i"
        ),
        {"i": invariant.value},
    )


def resolve_unseen(conn: Connection, invariant: Invariant, began: dt.datetime) -> int:
    """At a walk's end: its open violations that no pass has seen since it began are gone
    (a violation the walk found again, or another pass did meanwhile, was seen since)."""
    return int(
        conn.execute(
            text(
                "UPDATE invariant_violations SET resolved_at = now() WHERE invariant = :i"
                " AND resolved_at IS NULL AND last_seen_at < :began"
            ),
            {"i": invariant.value, "began": began},
        ).rowcount
    )


_OPEN = text(
    """
    INSERT INTO invariant_violations (invariant, subject, rows, trace_id)
    VALUES (:i, :s, CAST(:rows AS jsonb), :trace)
    ON CONFLICT (invariant, subject) WHERE resolved_at IS NULL
    DO UPDATE SET rows = EXCLUDED.rows, last_seen_at = now(),
                  trace_id = coalesce(EXCLUDED.trace_id, invariant_violations.trace_id)
    RETURNING id, (xmax = 0) AS opened
    """
)


@dataclass(frozen=True)
class Recorded:
    """What one pass changed: the violations it opened (new), and how many it resolved."""

    opened: list[tuple[int, Found]]
    seen: list[tuple[int, Found]]
    resolved: int


def record(conn: Connection, invariant: Invariant, found: list[Found], whole: bool) -> Recorded:
    """Open (or refresh) each found violation; when the pass covered the whole invariant,
    resolve its open violations that were not found."""
    opened: list[tuple[int, Found]] = []
    seen: list[tuple[int, Found]] = []
    for f in found:
        row = conn.execute(
            _OPEN,
            {
                "i": invariant.value,
                "s": f.subject,
                "rows": json.dumps(f.rows, default=str),
                "trace": f.trace_id,
            },
        ).one()
        (opened if row.opened else seen).append((int(row.id), f))
    resolved = 0
    if whole:
        resolved = conn.execute(
            text(
                "UPDATE invariant_violations SET resolved_at = now()"
                " WHERE invariant = :i AND resolved_at IS NULL AND subject <> ALL(:subjects)"
            ),
            {"i": invariant.value, "subjects": [f.subject for f in found]},
        ).rowcount
    return Recorded(opened, seen, int(resolved))


class RepairNotFound(InboxError):
    """No such repair, or no such open violation."""

    http_status = 404
    code = "not_found"


class NotAwaitingReview(InboxError):
    """This repair is not waiting for a review (applied or rejected already)."""

    http_status = 409
    code = "not_awaiting_approval"


@dataclass(frozen=True)
class Repair:
    id: int
    public_id: str
    violation_id: int
    kind: str
    preview: dict[str, Any]
    proposed_by: str
    status: str
    reviewer: str | None
    result: dict[str, Any] | None

    def public(self) -> dict[str, Any]:
        return {
            "id": self.public_id,
            "violation_id": self.violation_id,
            "kind": self.kind,
            "preview": self.preview,
            "proposed_by": self.proposed_by,
            "status": self.status,
            "reviewer": self.reviewer,
            "result": self.result,
        }


_REPAIR_COLUMNS = (
    "id, public_id, violation_id, kind, preview, proposed_by, status, reviewer, result"
)


def _audit(conn: Connection, actor: str, action: str, repair: Repair, **detail: Any) -> None:
    conn.execute(
        text(
            "INSERT INTO audit_log (actor, action, subject_kind, subject_id, detail)"
            " VALUES (:a, :act, 'invariant_repair', :id, CAST(:d AS jsonb))"
        ),
        {
            "a": actor,
            "act": action,
            "id": repair.id,
            "d": json.dumps(
                {"public_id": repair.public_id, "kind": repair.kind, **detail},
                default=str,
                sort_keys=True,
            ),
        },
    )


def propose(
    conn: Connection, violation_id: int, kind: RepairKind, preview: dict[str, Any], actor: str
) -> Repair:
    """A repair awaiting a second operator's approval, audited."""
    row = conn.execute(
        text(
            "INSERT INTO invariant_repairs (public_id, violation_id, kind, preview, proposed_by)"
            " VALUES (:p, :v, :k, CAST(:preview AS jsonb), :a)"
            f" RETURNING {_REPAIR_COLUMNS}"
        ),
        {
            "p": "rep_" + secrets.token_hex(8),
            "v": violation_id,
            "k": kind.value,
            "preview": json.dumps(preview, default=str),
            "a": actor,
        },
    ).one()
    repair = Repair(**row._mapping)
    _audit(conn, actor, "repair_proposed", repair, violation_id=violation_id, preview=preview)
    return repair


def get(conn: Connection, public_id: str, lock: bool = False) -> Repair:
    row = conn.execute(
        text(
            f"SELECT {_REPAIR_COLUMNS} FROM invariant_repairs WHERE public_id = :p"
            + (" FOR UPDATE" if lock else "")
        ),
        {"p": public_id},
    ).first()
    if row is None:
        raise RepairNotFound(f"no repair {public_id}")
    return Repair(**row._mapping)


def review(
    conn: Connection, public_id: str, reviewer: str, approve: bool, result: dict[str, Any]
) -> Repair:
    """Mark the repair applied (with what it did) or rejected, audited with both names.
    Raises Forbidden when the proposer approves their own, NotAwaitingReview when reviewed."""
    repair = get(conn, public_id, lock=True)
    if approve:
        check_approver(repair.proposed_by, reviewer)
    status = RepairStatus.APPLIED if approve else RepairStatus.REJECTED
    row = conn.execute(
        text(
            "UPDATE invariant_repairs SET status = :s, reviewer = :r, reviewed_at = now(),"
            " result = CAST(:res AS jsonb) WHERE id = :id AND status = 'awaiting_approval'"
            f" RETURNING {_REPAIR_COLUMNS}"
        ),
        {"s": status.value, "r": reviewer, "res": json.dumps(result, default=str), "id": repair.id},
    ).first()
    if row is None:
        raise NotAwaitingReview()
    done = Repair(**row._mapping)
    _audit(
        conn,
        reviewer,
        "repair_applied" if approve else "repair_rejected",
        done,
        proposed_by=repair.proposed_by,
        result=result,
    )
    return done


def checked(conn: Connection, repair: Repair, actor: str, result: dict[str, Any]) -> Repair:
    """The repair's result once the invariant was checked again after it; audited."""
    row = conn.execute(
        text(
            "UPDATE invariant_repairs SET result = CAST(:res AS jsonb) WHERE id = :id"
            f" RETURNING {_REPAIR_COLUMNS}"
        ),
        {"id": repair.id, "res": json.dumps(result, default=str)},
    ).one()
    done = Repair(**row._mapping)
    _audit(conn, actor, "repair_checked", done, result=result)
    return done
