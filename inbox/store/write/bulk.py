"""Bulk replays: the job row, the ids it matched, its lease and its progress (the changes;
``inbox.store.reads.bulk`` reads them).

A job snapshots the matching ids when it is created, so what it replays is
fixed by the request, not by whatever is quarantined when it happens to run.
One runner at a time holds the job's lease (owner + expiry, by the database
clock); every batch it commits renews the lease in the same transaction and
checks that the owner is still this runner and that the job was not cancelled.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.approval import BulkStatus, Job, initial_status
from inbox.domain.errors import BadRequest, IdempotencyConflict, InboxError
from inbox.domain.records import BulkJobId, TenantId
from inbox.domain.states import DeliveryState, EventState
from inbox.store.reads import listing
from inbox.store.reads.bulk import JOB_COLUMNS, get_job, to_job


class NotCancellable(InboxError):
    """This bulk replay has finished already."""

    http_status = 409
    code = "not_cancellable"


# The snapshot: the dead letters matching the filter, inside the token's scope.
_SNAPSHOT = {
    "events": "INSERT INTO bulk_replay_items (job_id, subject_id, public_id)"
    " SELECT :job, e.id, e.public_id" + listing.EVENTS_WHERE + " ORDER BY e.id LIMIT :cap",
    "deliveries": "INSERT INTO bulk_replay_items (job_id, subject_id, public_id)"
    " SELECT :job, d.id, d.public_id" + listing.DELIVERIES_WHERE + " ORDER BY d.id LIMIT :cap",
}
DEAD = {"events": EventState.QUARANTINED.value, "deliveries": DeliveryState.FAILED.value}


def create_job(
    conn: Connection,
    *,
    kind: str,
    match: listing.Filter,
    stored_filter: dict[str, Any],
    rate: int,
    scope: TenantId | None,
    actor: str,
    idempotency_digest: bytes | None,
    request_sha256: bytes,
    max_items: int,
    approval_min: int,
) -> tuple[Job, bool]:
    """Create a job and snapshot its items; or return the job this key already made.

    Returns (job, created). The same key with a different request is a 422. Two
    requests racing with one key: the second INSERT waits for the first's
    transaction, finds the key taken, and returns the first's job.
    """
    row = conn.execute(
        text(
            """
            INSERT INTO bulk_replays (public_id, kind, tenant_id, filter, rate, actor,
                                      idempotency_digest, request_sha256)
            VALUES (:p, :kind, :scope, CAST(:filter AS jsonb), :rate, :actor, :idem, :req)
            ON CONFLICT (idempotency_digest) WHERE idempotency_digest IS NOT NULL DO NOTHING
            RETURNING id
            """
        ),
        {
            "p": "rpl_" + secrets.token_hex(12),
            "kind": kind,
            "scope": scope,
            "filter": _json(stored_filter),
            "rate": rate,
            "actor": actor,
            "idem": idempotency_digest,
            "req": request_sha256,
        },
    ).first()
    if row is None:
        prior = conn.execute(
            text(
                f"SELECT {JOB_COLUMNS}, request_sha256 FROM bulk_replays"
                " WHERE idempotency_digest = :d"
            ),
            {"d": idempotency_digest},
        ).one()
        if bytes(prior.request_sha256) != request_sha256:
            raise IdempotencyConflict()
        return to_job(prior), False
    snap = conn.execute(
        text(_SNAPSHOT[kind]),
        {
            **listing.params(scope, replace(match, state=DEAD[kind])),
            "job": row.id,
            "cap": max_items + 1,
        },
    )
    if snap.rowcount > max_items:
        raise BadRequest(f"more than {max_items} items match; narrow the filter", limit=max_items)
    # Nothing matched: the job is complete as soon as it exists.
    status = initial_status(snap.rowcount, approval_min)
    job = conn.execute(
        text(
            "UPDATE bulk_replays SET total = :n, status = :status,"
            " finished_at = CASE WHEN :n = 0 THEN now() END"
            f" WHERE id = :id RETURNING {JOB_COLUMNS}"
        ),
        {"n": snap.rowcount, "id": row.id, "status": str(status)},
    ).one()
    detail: dict[str, Any] = {"public_id": job.public_id, "kind": kind, "filter": stored_filter}
    detail.update(total=job.total, status=job.status, requested_by=actor)
    if status == BulkStatus.AWAITING_APPROVAL:
        detail["approval_min"] = approval_min
    _audit(conn, actor, "bulk_replay", job.id, detail)
    return to_job(job), True


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def _audit(
    conn: Connection, actor: str, action: str, job_id: BulkJobId, detail: dict[str, Any]
) -> None:
    conn.execute(
        text(
            "INSERT INTO audit_log (actor, action, subject_kind, subject_id, detail)"
            " VALUES (:a, :act, 'bulk_replay', :id, CAST(:d AS jsonb))"
        ),
        {"a": actor, "act": action, "id": job_id, "d": _json(detail)},
    )


def cancel(conn: Connection, public_id: str, scope: TenantId | None, actor: str) -> Job | None:
    """Stop a job; the runner notices before its next batch. Cancelling twice is a no-op."""
    job = get_job(conn, public_id, scope)
    if job is None:
        return None
    row = conn.execute(
        text(
            f"""
            UPDATE bulk_replays
               SET status = 'cancelled', finished_at = now(),
                   lease_owner = NULL, lease_expires_at = NULL
             WHERE id = :id AND status IN ('awaiting_approval', 'queued', 'running')
            RETURNING {JOB_COLUMNS}
            """
        ),
        {"id": job.id},
    ).first()
    if row is None:
        current = get_job(conn, public_id, scope)
        if current is not None and current.status == BulkStatus.CANCELLED:
            return current
        raise NotCancellable()
    _audit(conn, actor, "cancel", job.id, {"public_id": job.public_id, "done": row.done})
    return to_job(row)


# SKIP LOCKED: while a runner is committing a batch it holds the row, and a
# second runner skips it rather than queueing behind it.
_CLAIM = text(
    f"""
    WITH j AS (
        SELECT id FROM bulk_replays
         WHERE id = :id AND status IN ('queued', 'running')
           AND (lease_owner IS NULL OR lease_expires_at <= now())
           FOR UPDATE SKIP LOCKED
    )
    UPDATE bulk_replays b
       SET status = 'running', lease_owner = :owner,
           lease_expires_at = now() + make_interval(secs => :lease),
           started_at = coalesce(b.started_at, now())
      FROM j WHERE b.id = j.id
    RETURNING {", ".join("b." + c.strip() for c in JOB_COLUMNS.split(","))}
    """
)


def claim(conn: Connection, job_id: BulkJobId, owner: str, lease: float) -> Job | None:
    row = conn.execute(_CLAIM, {"id": job_id, "owner": owner, "lease": lease}).first()
    return to_job(row) if row is not None else None


def renew(conn: Connection, job_id: BulkJobId, owner: str, lease: float) -> Job | None:
    """Extend this runner's lease (locking the row for the batch); None if lost or cancelled."""
    row = conn.execute(
        text(
            f"""
            UPDATE bulk_replays SET lease_expires_at = now() + make_interval(secs => :lease)
             WHERE id = :id AND lease_owner = :owner AND status = 'running'
            RETURNING {JOB_COLUMNS}
            """
        ),
        {"id": job_id, "owner": owner, "lease": lease},
    ).first()
    return to_job(row) if row is not None else None


def record(conn: Connection, job_id: BulkJobId, outcomes: dict[int, str]) -> Job:
    """Store each item's outcome and the job's counters; completes the job when all are done.

    With no outcomes, this completes a job that has nothing (left) to do.
    """
    if outcomes:
        conn.execute(
            text(
                "UPDATE bulk_replay_items SET outcome = :o, done_at = now()"
                " WHERE job_id = :id AND subject_id = :s AND outcome IS NULL"
            ),
            [{"id": job_id, "s": s, "o": o} for s, o in outcomes.items()],
        )
    moved = sum(1 for o in outcomes.values() if o == "moved")
    counted = conn.execute(
        text(
            "UPDATE bulk_replays SET done = done + :n, moved = moved + :m,"
            " skipped = skipped + :n - :m WHERE id = :id RETURNING done, total"
        ),
        {"id": job_id, "n": len(outcomes), "m": moved},
    ).one()
    if outcomes and counted.done < counted.total:
        sql = f"SELECT {JOB_COLUMNS} FROM bulk_replays WHERE id = :id"
        return to_job(conn.execute(text(sql), {"id": job_id}).one())
    done = to_job(
        conn.execute(
            text(
                "UPDATE bulk_replays SET status = 'completed', finished_at = now(),"
                " lease_owner = NULL, lease_expires_at = NULL"
                f" WHERE id = :id RETURNING {JOB_COLUMNS}"
            ),
            {"id": job_id},
        ).one()
    )
    # The end of the story in the audit log: what the job did, for whom, approved by whom.
    detail: dict[str, Any] = {"public_id": done.public_id, "requested_by": done.actor}
    detail.update(approved_by=done.reviewer, total=done.total, moved=done.moved)
    detail.update(skipped=done.skipped)
    _audit(conn, "inbox", "complete", done.id, detail)
    return done


def release(conn: Connection, job_id: BulkJobId, owner: str) -> None:
    """Give the lease back so the next runner can continue at once."""
    conn.execute(
        text(
            "UPDATE bulk_replays SET lease_owner = NULL, lease_expires_at = NULL"
            " WHERE id = :id AND lease_owner = :owner"
        ),
        {"id": job_id, "owner": owner},
    )
