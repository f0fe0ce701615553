"""The invariants the inbox checks about itself, by name: what each means, and its repair.

Pure: the names, what each means (``docs/explanation/invariants.md`` says why each must
hold), the constants their SQL is built from (``inbox.store.reads.invariants``), what a
violation is, and which violations have a safe repair. The checks run incrementally
(rows since a watermark) and in a slow full pass (``inbox.services.audit``).

A repair is only ever proposed, previewed, approved by a second operator and checked
again afterwards; none is automatic. A repair that could double an effect (re-running a
step, re-sending a callback that may have been sent) does not exist here at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from inbox.domain.errors import BadRequest, Forbidden
from inbox.domain.states import DELIVERY_STATES, DeliveryState, EventState


class Invariant(StrEnum):
    EVENT_STATE = "event_state"
    LEASE_RECLAIMED = "lease_reclaimed"
    STEP_ONCE = "step_once"
    DELIVERY_PER_ENDPOINT = "delivery_per_endpoint"
    WEBHOOK_ID_ONE_BODY = "webhook_id_one_body"
    LANE_ORDER = "lane_order"
    PARTITIONS_AHEAD = "partitions_ahead"
    HELD_NOT_PRUNED = "held_not_pruned"
    OPERATOR_AUDITED = "operator_audited"


N = Invariant

# One line each: what a violation of it means (the console, the CLI and the log say it).
MEANING: dict[Invariant, str] = {
    N.EVENT_STATE: "every stored event is in exactly one live state (done, leased with a"
    " fresh lease, scheduled, quarantined, held, filtered): its columns agree with its state",
    N.LEASE_RECLAIMED: "no lease (an event's or a delivery's) expired longer ago than the"
    " sweep's bound without being reclaimed",
    N.STEP_ONCE: "no step key has two committed effects or two outcomes",
    N.DELIVERY_PER_ENDPOINT: "every committed callback intent has exactly one delivery"
    " (held, pending, delivered or dead) per subscribed endpoint",
    N.WEBHOOK_ID_ONE_BODY: "no webhook-id was sent twice with different bodies",
    N.LANE_ORDER: "no event of an ordered lane ran while an earlier one of its lane was"
    " unfinished, and no lane is held by a block whose event no longer blocks it",
    N.PARTITIONS_AHEAD: "today's partitions and those of every day up to the furthest"
    " scheduled retry exist",
    N.HELD_NOT_PRUNED: "nothing under a legal hold was pruned",
    N.OPERATOR_AUDITED: "every operator action (replay, review, hold) has its audit row",
}

# A callback intent's delivery counts as owed-and-present in these states. ``held``
# (an endpoint paused or disabled: written, attempted later) is the outbound change's;
# the lead extends this one constant if a delivery state is added or renamed.
OWED_DELIVERY_STATES: tuple[str, ...] = tuple(dict.fromkeys((*DELIVERY_STATES, "held")))

# The states in which an event no longer holds its lane: a later event of the lane may
# run. A quarantined event is not one of them: it blocks its lane (truth 15) until an
# operator skips it (``lane_blocks.skipped_at``) or replays it; the lane check reads the
# skip from ``lane_blocks``.
LANE_RELEASING_STATES: tuple[str, ...] = (
    EventState.COMPLETED,
    EventState.FILTERED,
)

# An expired lease the sweep has not reclaimed this long after it expired is a violation:
# the sweep runs every INBOX_SWEEP_SECONDS, so it is that many rounds late.
SWEEP_ROUNDS_LATE = 3
LEASE_BOUND_MIN_SECONDS = 15.0  # a beat on a loaded machine may tick a few seconds late


def lease_bound_seconds(sweep_seconds: float) -> float:
    """How long after its expiry a lease must have been reclaimed: three sweeps (90 s at
    the default INBOX_SWEEP_SECONDS of 30), and never less than 15 s."""
    return max(LEASE_BOUND_MIN_SECONDS, SWEEP_ROUNDS_LATE * sweep_seconds)


# How far ahead partitions must exist for retries that are due later: at most this many
# days (beat makes a week ahead; a retry further out is capped by the retry schedule).
RETRY_HORIZON_DAYS = 7


# Beat's passes: the rows new since each watermark every minute, everything every 6 hours.
INCREMENTAL_SECONDS = 60.0
FULL_SECONDS = 6 * 3600.0


class RepairKind(StrEnum):
    RECLAIM_LEASES = "reclaim_leases"  # the sweep's own statement, run now
    WRITE_HELD_DELIVERY = "write_held_delivery"  # a missing delivery written, not sent
    RELEASE_LANE = "release_lane"  # a lane's stale block removed: its next event may run


# The one repair each invariant may propose; an invariant absent here has none (its
# break is for an operator to investigate, as any repair could double an effect). Within
# an invariant, only some violations have it (``repair_of``).
REPAIRS: dict[Invariant, RepairKind] = {
    N.LEASE_RECLAIMED: RepairKind.RECLAIM_LEASES,
    N.DELIVERY_PER_ENDPOINT: RepairKind.WRITE_HELD_DELIVERY,
    N.LANE_ORDER: RepairKind.RELEASE_LANE,
}

# A repair writes a missing delivery only as held: it exists, and is sent only once an
# operator releases it (``inbox endpoints resume``/``enable`` release an endpoint's held
# deliveries). It is written from its callback intent, which keeps the envelope (sealed as
# the event's payload is); an intent recorded before intents kept it cannot be repaired.
HELD_DELIVERY_STATE = "held"
INTENTS_KEEP_BODIES = True

# The problem a delivery check names for an intent with no delivery at all: the one
# delivery violation a repair may write (two deliveries, or one in a state that does not
# owe it, are an operator's to investigate: writing could double a send).
NO_DELIVERY = "no delivery for this endpoint"

# The subject of a lane held by a block that no longer justifies it (``lane_blocks`` row,
# not skipped, whose event is not quarantined, or gone): the one lane violation a repair
# may release. A lane event that ran too early cannot be undone.
STALE_BLOCK = "lane_block:"


def repair_available(kind: RepairKind) -> bool:
    """Whether this version can carry this repair out."""
    if kind is RepairKind.WRITE_HELD_DELIVERY:
        return INTENTS_KEEP_BODIES and HELD_DELIVERY_STATE in {s.value for s in DeliveryState}
    return True


def repair_of(invariant: str, subject: str, rows: Any) -> RepairKind | None:
    """The safe repair of this violation (its invariant, subject and rows), or None."""
    kind = REPAIRS.get(Invariant(invariant))
    if kind is RepairKind.WRITE_HELD_DELIVERY:
        problems = {r.get("problem") for r in rows if isinstance(r, dict)}
        return kind if NO_DELIVERY in problems else None
    if kind is RepairKind.RELEASE_LANE:
        return kind if subject.startswith(STALE_BLOCK) else None
    return kind


def parse(names: list[str] | tuple[str, ...]) -> list[Invariant]:
    """Invariant names as given (none: every one), or BadRequest naming the unknown."""
    if not names:
        return list(Invariant)
    unknown = [n for n in names if n not in {i.value for i in Invariant}]
    if unknown:
        known = ", ".join(i.value for i in Invariant)
        raise BadRequest(f"unknown invariant {', '.join(unknown)}: one of {known}")
    return [Invariant(n) for n in dict.fromkeys(names)]


@dataclass(frozen=True, slots=True)
class Found:
    """One violation as a check finds it: its subject (what it is about, stable between
    checks, so a violation is opened once and closed when it is no longer found) and the
    rows involved, as the console and the CLI show them."""

    invariant: str  # an Invariant's value
    subject: str
    # JSON: a list of objects, one per row involved (its table, ids, state, problem).
    rows: Any = field(default_factory=list)
    trace_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant,
            "subject": self.subject,
            "meaning": MEANING[Invariant(self.invariant)],
            "rows": self.rows,
            "trace_id": self.trace_id,
        }


class RepairStatus(StrEnum):
    AWAITING_APPROVAL = "awaiting_approval"
    APPLIED = "applied"
    REJECTED = "rejected"


def check_approver(proposer: str, approver: str) -> None:
    """A repair is approved by a second operator, never by the one who proposed it."""
    if proposer == approver:
        raise Forbidden("A repair must be approved by a different operator than its proposer.")
