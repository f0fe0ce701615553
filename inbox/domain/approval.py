"""The two-person rule for bulk replays, and the bulk job's states.

A bulk replay that matches more than ``INBOX_BULK_APPROVAL_MIN`` items waits in
``awaiting_approval`` until a second operator (another token name) approves it, or
anyone entitled rejects it. The requester can never approve their own job.
The database CHECK on ``bulk_replays.status`` lists the same states.

Pure: imports no framework or driver.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from inbox.domain.errors import Forbidden, InboxError, InvalidTransition
from inbox.domain.records import BulkJobId, TenantId

DEFAULT_APPROVAL_MIN = 100


class BulkStatus(StrEnum):
    AWAITING_APPROVAL = "awaiting_approval"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"


B = BulkStatus


class NotRun(StrEnum):
    """Why a call to run a bulk replay ran nothing (``inbox.services.bulk.BulkRun``)."""

    BUSY = "busy"  # another runner holds the job's lease
    MISSING = "missing"  # no such job


ALLOWED: frozenset[tuple[BulkStatus, BulkStatus]] = frozenset(
    {
        (B.AWAITING_APPROVAL, B.QUEUED),  # a second operator approved it
        (B.AWAITING_APPROVAL, B.REJECTED),  # a second operator (or the requester) refused it
        (B.AWAITING_APPROVAL, B.CANCELLED),  # the requester withdrew it
        (B.QUEUED, B.RUNNING),  # a runner took the lease
        (B.QUEUED, B.COMPLETED),  # nothing was left to replay
        (B.QUEUED, B.CANCELLED),
        (B.RUNNING, B.COMPLETED),
        (B.RUNNING, B.CANCELLED),
    }
)

# A runner may work on these; nothing else is ever replayed.
RUNNABLE: frozenset[BulkStatus] = frozenset({B.QUEUED, B.RUNNING})
FINISHED: frozenset[BulkStatus] = frozenset({B.COMPLETED, B.CANCELLED, B.REJECTED})


def transition(current: BulkStatus | str, target: BulkStatus | str) -> BulkStatus:
    cur, tgt = BulkStatus(current), BulkStatus(target)
    if (cur, tgt) not in ALLOWED:
        raise InvalidTransition(f"{cur} -> {tgt} is not allowed")
    return tgt


def initial_status(total: int, approval_min: int) -> BulkStatus:
    """Nothing to do: completed at once; more than the threshold: awaiting approval."""
    if total == 0:
        return B.COMPLETED
    return B.AWAITING_APPROVAL if total > approval_min else B.QUEUED


class NotAwaitingApproval(InboxError):
    """This bulk replay is not waiting for approval (approved, rejected or finished already)."""

    http_status = 409
    code = "not_awaiting_approval"


def check_reviewer(requester: str, reviewer: str, approve: bool) -> None:
    """Raise Forbidden when the requester tries to approve their own bulk replay.

    Rejecting one's own request is allowed (it only stops a replay from happening).
    """
    if approve and requester == reviewer:
        raise Forbidden(
            "A bulk replay must be approved by a different operator than the one who requested it."
        )


@dataclass(frozen=True, slots=True)
class Job:
    id: BulkJobId
    public_id: str
    kind: str
    tenant_id: TenantId | None
    filter: dict[str, Any]
    rate: int
    actor: str
    status: BulkStatus
    total: int
    done: int
    moved: int
    skipped: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    # The two-person rule: the second operator who approved or rejected the job.
    reviewer: str | None = None
    reviewed_at: datetime | None = None
    review_note: str | None = None

    def public(self) -> dict[str, Any]:
        """What the API shows: the public id, no row ids."""
        out = {k: v for k, v in asdict(self).items() if k not in ("id", "tenant_id")}
        out["id"] = out.pop("public_id")
        return out
