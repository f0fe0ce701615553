"""The two-person rule's writes: approve or reject a bulk replay that waits for it.

The state test is in the UPDATE itself, so two operators approving (or one approving
while another rejects) at once: the row lock serialises them and the second finds
the job no longer ``awaiting_approval`` (409). The requester is checked against the
reviewer before anything is written; every review is audited with both names.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.approval import Job, NotAwaitingApproval, check_reviewer
from inbox.domain.records import TenantId
from inbox.store.reads.bulk import JOB_COLUMNS, get_job, to_job
from inbox.store.write.bulk import _audit


def review(
    conn: Connection,
    public_id: str,
    scope: TenantId | None,
    reviewer: str,
    *,
    approve: bool,
    note: str | None = None,
) -> Job | None:
    """Approve (→ queued, for a runner to start) or reject (→ rejected, never run).

    None: no such job in the scope. Raises Forbidden when the requester approves
    their own job, NotAwaitingApproval when it is not waiting for a review.
    """
    job = get_job(conn, public_id, scope)
    if job is None:
        return None
    check_reviewer(job.actor, reviewer, approve)
    row = conn.execute(
        text(
            f"""
            UPDATE bulk_replays
               SET status = CASE WHEN :approve THEN 'queued' ELSE 'rejected' END,
                   finished_at = CASE WHEN :approve THEN NULL ELSE now() END,
                   reviewer = :reviewer, reviewed_at = now(), review_note = :note
             WHERE id = :id AND status = 'awaiting_approval'
            RETURNING {JOB_COLUMNS}
            """
        ),
        {"id": job.id, "approve": approve, "reviewer": reviewer, "note": note},
    ).first()
    if row is None:
        raise NotAwaitingApproval()
    done = to_job(row)
    who = "approved_by" if approve else "rejected_by"
    detail: dict[str, Any] = {"public_id": done.public_id, "requested_by": done.actor}
    detail[who] = reviewer
    detail.update(total=done.total, filter=done.filter, note=note)
    _audit(conn, reviewer, "approve" if approve else "reject", done.id, detail)
    return done
