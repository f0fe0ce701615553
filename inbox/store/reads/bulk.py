"""Bulk replays as the API, the console, the CLI and the runner read them: a job, the
items it has left, the jobs waiting for a runner or for a second operator."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.approval import BulkStatus, Job
from inbox.domain.records import BulkJobId
from inbox.store.reads.scope import Scope, scoped


@dataclass(frozen=True, slots=True)
class Item:
    subject_id: int
    public_id: str


# A job's columns, for every query that returns one (``inbox.store.write.bulk`` too).
JOB_COLUMNS = """
id, public_id, kind, tenant_id, filter, rate, actor, status, total, done, moved, skipped,
created_at, started_at, finished_at, reviewer, reviewed_at, review_note
"""


def to_job(row: Any) -> Job:
    values = {k: row._mapping[k] for k in Job.__dataclass_fields__}
    return Job(**{**values, "status": BulkStatus(values["status"])})


def get_job(conn: Connection, public_id: str, scope: Scope) -> Job | None:
    """A job the scope may see: a tenant's token sees only jobs made in that scope."""
    row = conn.execute(
        text(f"SELECT {JOB_COLUMNS} FROM bulk_replays WHERE public_id = :p"), {"p": public_id}
    ).first()
    if row is None or (scope is not None and row.tenant_id != scope):
        return None
    return to_job(row)


def status(conn: Connection, job_id: BulkJobId) -> BulkStatus | None:
    value = conn.execute(
        text("SELECT status FROM bulk_replays WHERE id = :id"), {"id": job_id}
    ).scalar()
    return BulkStatus(value) if value is not None else None


def next_items(conn: Connection, job_id: BulkJobId, limit: int) -> list[Item]:
    rows = conn.execute(
        text(
            "SELECT subject_id, public_id FROM bulk_replay_items"
            " WHERE job_id = :id AND outcome IS NULL ORDER BY subject_id LIMIT :n"
        ),
        {"id": job_id, "n": limit},
    )
    return [Item(int(r.subject_id), r.public_id) for r in rows]


def replayed_since(conn: Connection, kind: str, ids: list[int], since: datetime) -> set[int]:
    """Items someone replayed after this job was made: asked for twice, replayed once."""
    subject = {"events": "event", "deliveries": "delivery"}[kind]
    rows = conn.execute(
        text(
            "SELECT DISTINCT subject_id FROM audit_log WHERE subject_kind = :k"
            " AND action = 'replay' AND subject_id = ANY(:ids) AND at >= :since"
        ),
        {"k": subject, "ids": ids, "since": since},
    )
    return {int(r.subject_id) for r in rows}


def due_jobs(conn: Connection) -> list[BulkJobId]:
    """Jobs waiting for a runner: queued, or running with no live lease (for the sweeper)."""
    rows = conn.execute(
        text(
            "SELECT id FROM bulk_replays WHERE status IN ('queued', 'running')"
            " AND (lease_owner IS NULL OR lease_expires_at <= now()) ORDER BY id"
        )
    )
    return [BulkJobId(int(r.id)) for r in rows]


def awaiting(conn: Connection, scope: Scope, limit: int = 50) -> list[Job]:
    """Jobs waiting for a second operator, oldest first (for the console and CLI)."""
    rows = conn.execute(
        text(
            f"SELECT {JOB_COLUMNS} FROM bulk_replays WHERE status = 'awaiting_approval'"
            f" AND {scoped('tenant_id')}"
            " ORDER BY id LIMIT :n"
        ),
        {"scope": scope, "n": limit},
    )
    return [to_job(r) for r in rows]


@dataclass(frozen=True, slots=True)
class Outcomes:
    """What the items a bulk replay moved are doing now."""

    succeeded: int  # events completed / deliveries delivered
    dead_again: int  # quarantined / failed again
    pending: int  # back in the inbox or the outbox, not finished yet
    gone: int  # deleted since (retention)


_OUTCOMES = {
    "events": """
        SELECT count(*) FILTER (WHERE e.state = 'completed') AS succeeded,
               count(*) FILTER (WHERE e.state = 'quarantined') AS dead_again,
               count(*) FILTER (WHERE e.state IN ('received', 'processing')) AS pending,
               count(*) FILTER (WHERE e.id IS NULL) AS gone
          FROM bulk_replay_items i LEFT JOIN events e ON e.id = i.subject_id
         WHERE i.job_id = :job AND i.outcome = 'moved'
    """,
    "deliveries": """
        SELECT count(*) FILTER (WHERE d.state = 'delivered') AS succeeded,
               count(*) FILTER (WHERE d.state = 'failed') AS dead_again,
               count(*) FILTER (WHERE d.state IN ('pending', 'sending')) AS pending,
               count(*) FILTER (WHERE d.id IS NULL) AS gone
          FROM bulk_replay_items i LEFT JOIN deliveries d ON d.id = i.subject_id
         WHERE i.job_id = :job AND i.outcome = 'moved'
    """,
}


def replay_outcomes(conn: Connection, job_id: BulkJobId, kind: str) -> Outcomes:
    row = conn.execute(text(_OUTCOMES[kind]), {"job": job_id}).one()
    return Outcomes(int(row.succeeded), int(row.dead_again), int(row.pending), int(row.gone))
