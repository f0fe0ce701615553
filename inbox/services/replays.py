"""Bulk replays as operators run them: start, dry run, approve or reject, cancel, watch.

One implementation behind the admin API, the console and the CLI. The job itself (its
snapshot, lease and rate) is ``inbox.services.bulk``; the two-person rule's checks are
``inbox.domain.approval``. More than ``INBOX_BULK_APPROVAL_MIN`` items: the job waits for
a second operator, and an approval starts its runner (a worker; the CLI runs it in line).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from inbox.domain.approval import BulkStatus, Job
from inbox.domain.errors import BadRequest, NotFound
from inbox.domain.idempotency import validate_key
from inbox.domain.records import BulkJobId, TenantId
from inbox.domain.states import EventState
from inbox.services import admin, bulk, operations, preview
from inbox.services.operations import Actor
from inbox.services.runtime import Rung, Runtime
from inbox.store.reads import bulk as bulk_reads
from inbox.store.reads import events as event_reads
from inbox.store.reads.listing import Filter
from inbox.store.write import bulk as store
from inbox.store.write import bulk_review

__all__ = [
    "MAX_NOTE",
    "EventReplayPlan",
    "Job",
    "TooManyIds",
    "awaiting",
    "cancel",
    "get_job",
    "job_on",
    "plan_event_replay",
    "preview_bulk_replay",
    "preview_events",
    "preview_job",
    "review",
    "run_here",
    "start",
]

MAX_NOTE = 500


class TooManyIds(BadRequest):
    """More events named by id than one operator may replay alone: replay them by filter,
    which a second operator approves."""


@dataclass(frozen=True, slots=True)
class EventReplayPlan:
    """What a replay of events by id or by filter would move, and whether it takes a second
    operator (more than ``INBOX_BULK_APPROVAL_MIN`` events: a bulk job that waits)."""

    # The events, by public id; by filter at most one more than a dry run plans or one
    # operator may replay alone, whichever is more (not every match: a bulk job snapshots
    # those).
    targets: list[str]
    approval_min: int

    @property
    def needs_approval(self) -> bool:
        return len(self.targets) > self.approval_min


def plan_event_replay(
    rt: Runtime,
    actor: Actor,
    ids: Sequence[str],
    *,
    tenant: str | None = None,
    source: str | None = None,
    since: datetime | None = None,
    quarantined: bool = False,
) -> EventReplayPlan:
    """The events a replay names: ``ids`` (each must exist in the actor's scope), or with
    ``quarantined`` the quarantined events of ``tenant`` (and ``source``, ``since``). A
    tenant or source named must exist. Past the approval threshold by filter, the plan
    says so; past it by ids, ``TooManyIds``."""
    approval_min = rt.settings.bulk_approval_min
    if len(ids) > approval_min:
        raise TooManyIds(
            f"more than {approval_min} ids: replay by filter (--quarantined), which a second"
            " operator approves"
        )
    targets = list(ids)
    with rt.engine.connect() as conn:
        admin.check_named(conn, tenant, source)
        operations.check_visible(conn, actor, "events", targets)
        if quarantined:
            f = Filter(tenant=tenant, source=source, state=EventState.QUARANTINED, since=since)
            most = max(approval_min, preview.MAX_PLANNED) + 1
            rows = event_reads.list_events(conn, actor.scope, f, most, None)
            targets = [r.public_id for r in rows]
    return EventReplayPlan(targets, approval_min)


def start(
    rt: Runtime, actor: Actor, req: bulk.BulkRequest, key: str | None = None
) -> tuple[Job, bool]:
    """Create (or, for the same key, find) a bulk replay job; a job that needs no
    approval has its runner rung. Returns the job and whether this call made it."""
    if key is not None:
        validate_key(key)
    approval_min = rt.settings.bulk_approval_min
    with rt.engine.begin() as conn:
        job, created = bulk.create(conn, req, actor.scope, actor.name, key, approval_min)
    if created and job.status == BulkStatus.QUEUED:
        rt.bells.ring("start_bulk_replay", job.id)
    return job, created


def preview_bulk_replay(rt: Runtime, actor: Actor, req: bulk.BulkRequest) -> preview.Preview:
    """A bulk replay's dry run over what its filter matches now; writes only its audit row."""
    if req.kind != "events":
        raise BadRequest("dry_run previews replays of events (kind events)")
    reg = preview.load_playbooks(rt.settings.playbook_modules)
    with rt.engine.begin() as conn:
        found = preview.preview_filter(conn, actor.scope, req.match, reg)
        preview.audit(conn, actor.name, found, filter=req.stored_filter)
    return found


def preview_events(
    rt: Runtime, actor: Actor, public_ids: list[str], about: dict[str, Any]
) -> preview.Preview:
    """The dry run of a replay of these events: the plan, and its one audit row
    (``about``: the ids or the filter the operator named)."""
    reg = preview.load_playbooks(rt.settings.playbook_modules)
    with rt.engine.begin() as conn:
        found = preview.preview(conn, public_ids, reg)
        preview.audit(conn, actor.name, found, **about)
    return found


def preview_job(rt: Runtime, actor: Actor, job: Job) -> preview.Preview:
    """What an approver sees: the plan of the job's snapshotted events, audited."""
    reg = preview.load_playbooks(rt.settings.playbook_modules)
    with rt.engine.begin() as conn:
        found = preview.preview_job(conn, job.id, reg)
        preview.audit(conn, actor.name, found, bulk_replay=job.public_id, bulk_replay_id=job.id)
    return found


def review(
    rt: Runtime, actor: Actor, public_id: str, *, approve: bool, note: str | None = None
) -> Job:
    """The two-person rule: another operator approves (the runner is rung) or rejects."""
    if note is not None and len(note) > MAX_NOTE:
        raise BadRequest(f"note must be at most {MAX_NOTE} characters")
    with rt.engine.begin() as conn:
        job = bulk_review.review(
            conn, public_id, actor.scope, actor.name, approve=approve, note=note or None
        )
    if job is None:
        raise NotFound(f"No bulk replay {public_id}.")
    if approve:
        rt.bells.ring("start_bulk_replay", job.id)
    return job


def run_here(rt: Runtime, job_id: BulkJobId) -> tuple[bulk.BulkRun, Rung | None]:
    """Run an approved job in this process at its rate (the CLI's way), then ring the
    doorbell once for what it moved."""
    run = bulk.run_bulk_once(rt, job_id)
    return run, rt.bells.ring("doorbell") if run.moved else None


def cancel(rt: Runtime, actor: Actor, public_id: str) -> Job:
    """Stop a job; its runner stops before its next batch. 409 once it has finished."""
    with rt.engine.begin() as conn:
        job = store.cancel(conn, public_id, actor.scope, actor.name)
    if job is None:
        raise NotFound(f"No bulk replay {public_id}.")
    return job


def get_job(rt: Runtime, public_id: str, scope: TenantId | None) -> Job | None:
    with rt.engine.connect() as conn:
        return job_on(conn, public_id, scope)


def job_on(conn: Connection, public_id: str, scope: TenantId | None) -> Job | None:
    """``get_job`` on a connection the caller holds (a page reading more beside it)."""
    return bulk_reads.get_job(conn, public_id, scope)


def awaiting(rt: Runtime, scope: TenantId | None) -> list[Job]:
    """Jobs waiting for a second operator, oldest first."""
    with rt.engine.connect() as conn:
        return bulk_reads.awaiting(conn, scope)
