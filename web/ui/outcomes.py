"""What a bulk replay achieved, in words an operator can trust at a glance.

"completed" only means every item was moved back; whether the replay *worked* is
what the moved items became: completed (delivered), dead again, or still pending.
A job whose every event went straight back to quarantine must not look green.
"""

from __future__ import annotations

from typing import Any

from inbox.domain.approval import BulkStatus as B
from inbox.services.replays import Job
from inbox.store.reads.bulk import Outcomes

# The CSS state class for each verdict.
CSS = {
    "active": "running",
    "ok": "completed",
    "mixed": "pending",
    "bad": "failed",
    "off": "cancelled",
}


def verdict(job: Job, o: Outcomes) -> tuple[str, str]:
    """(verdict, label) for the job's badge."""
    dead = "quarantined" if job.kind == "events" else "failed"
    if job.status in (B.AWAITING_APPROVAL, B.QUEUED, B.RUNNING):
        return "active", job.status.replace("_", " ")
    if job.status in (B.CANCELLED, B.REJECTED):
        return "off", job.status
    if o.pending:
        return "active", "moved; results pending"
    if job.moved and o.dead_again == job.moved:
        return "bad", f"all {dead} again"
    if o.dead_again:
        return "mixed", f"completed; {o.dead_again} {dead} again"
    return "ok", "completed"


def eta_seconds(job: Job) -> float | None:
    """Time left to move the rest at the job's rate (None once nothing is left to move)."""
    left = job.total - job.done
    if job.status not in ("queued", "running") or left <= 0:
        return None
    return left / max(1, job.rate)


def shown(job: Job, o: Outcomes) -> dict[str, Any]:
    v, label = verdict(job, o)
    return {
        "succeeded": o.succeeded,
        "dead_again": o.dead_again,
        "pending": o.pending,
        "gone": o.gone,
        "verdict": v,
        "css": CSS[v],
        "label": label,
        "eta_seconds": eta_seconds(job),
        # The page keeps polling until the moved items have all settled.
        "settled": job.status in (B.COMPLETED, B.CANCELLED, B.REJECTED) and o.pending == 0,
    }
