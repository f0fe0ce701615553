"""Bulk replays: what a request may ask for, and the runner that carries one out.

``run_bulk_once(rt, job_id)`` is a plain function (a Celery task calls it;
tests call it directly). It leases the job, then replays the snapshotted items
in small batches at no more than the job's rate, committing each batch together
with its outcomes, the job's counters and a renewed lease. It stops when the
items run out, when the job is cancelled, when another runner holds the lease,
or when its time budget is spent (releasing the lease for the next task).

Replaying an item only moves a dead letter (``inbox.store.write.operator.replay`` and
``inbox.store.write.deliveries.replay`` check the state in their UPDATE), and an item
someone replayed after the job was made is skipped: two jobs over the same
events, or one request sent twice, move each event at most once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import Connection

from inbox.domain.approval import DEFAULT_APPROVAL_MIN, BulkStatus, Job, NotRun
from inbox.domain.errors import BadRequest, InboxError
from inbox.domain.records import BulkJobId, EndpointId, TenantId
from inbox.services.ports import BulkItem, BulkStore
from inbox.services.runtime import Runtime
from inbox.services.wiring import bulk_store
from inbox.store.reads import listing
from inbox.store.write import bulk as bulk_writes

log = logging.getLogger(__name__)
Tx = TypeVar("Tx")

KINDS = ("events", "deliveries")
DEFAULT_RATE = 50
MAX_RATE = 1000
MAX_ITEMS = 100_000
# About ten commits a second, whatever the rate.
BATCHES_PER_SECOND = 10
_FILTER_KEYS = {
    "events": {"tenant", "source", "state", "type", "untyped", "error", "since", "until"},
    "deliveries": {"tenant", "endpoint", "state", "type", "untyped", "since", "until"},
}


def parse_time(value: str, name: str) -> datetime:
    """An ISO 8601 time; one without an offset is taken as UTC."""
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise BadRequest(f"{name} must be an ISO 8601 time") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class BulkRequest:
    kind: str
    match: listing.Filter
    rate: int
    stored_filter: dict[str, str]

    def sha256(self) -> bytes:
        canonical = {"kind": self.kind, "filter": self.stored_filter, "rate": self.rate}
        return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).digest()


def parse_request(body: object) -> BulkRequest:
    """Validate ``{"kind": ..., "filter": {...}, "rate": N}``."""
    if not isinstance(body, dict):
        raise BadRequest("expected a JSON object")
    kind = body.get("kind")
    if kind not in KINDS:
        raise BadRequest(f"kind must be one of {', '.join(KINDS)}")
    raw = body.get("filter") or {}
    if not isinstance(raw, dict):
        raise BadRequest("filter must be an object")
    unknown = set(raw) - _FILTER_KEYS[kind]
    if unknown:
        raise BadRequest(f"unknown filter keys for {kind}: {', '.join(sorted(unknown))}")
    if not all(isinstance(v, str) and v for v in raw.values()):
        raise BadRequest("filter values must be non-empty strings")
    dead = bulk_writes.DEAD[kind]
    if raw.get("state", dead) != dead:
        raise BadRequest(f"only {dead} {kind} can be replayed")
    if raw.get("untyped", "true") != "true" or ("untyped" in raw and "type" in raw):
        raise BadRequest('untyped is "true" (the items without an event type), without type')
    rate = body.get("rate", DEFAULT_RATE)
    if isinstance(rate, bool) or not isinstance(rate, int) or not 1 <= rate <= MAX_RATE:
        raise BadRequest(f"rate must be a whole number from 1 to {MAX_RATE} (items a second)")
    match = listing.Filter(
        tenant=raw.get("tenant"),
        source=raw.get("source"),
        endpoint=raw.get("endpoint"),
        state=dead,
        event_type=raw.get("type"),
        untyped="untyped" in raw,
        error_class=raw.get("error"),
        since=parse_time(raw["since"], "since") if "since" in raw else None,
        until=parse_time(raw["until"], "until") if "until" in raw else None,
    )
    stored = {k: v for k, v in raw.items() if k not in ("since", "until")}
    stored.update({k: getattr(match, k).isoformat() for k in ("since", "until") if k in raw})
    stored["state"] = dead
    return BulkRequest(kind, match, rate, stored)


def idempotency_digest(scope: TenantId | None, actor: str, key: str) -> bytes:
    """An Idempotency-Key is kept as a digest, scoped to the token's tenant and name."""
    h = hashlib.sha256()
    for part in ("bulk", "*" if scope is None else str(scope), actor, key):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(4, "big") + data)
    return h.digest()


def create(
    conn: Connection,
    req: BulkRequest,
    scope: TenantId | None,
    actor: str,
    key: str | None,
    approval_min: int = DEFAULT_APPROVAL_MIN,
) -> tuple[Job, bool]:
    """Snapshot the matching items into a new job (or return the job this key made).

    More than ``approval_min`` items: the job waits for a second operator's approval.
    """
    return bulk_writes.create_job(
        conn,
        kind=req.kind,
        match=req.match,
        stored_filter=req.stored_filter,
        rate=req.rate,
        scope=scope,
        actor=actor,
        idempotency_digest=idempotency_digest(scope, actor, key) if key else None,
        request_sha256=req.sha256(),
        max_items=MAX_ITEMS,
        approval_min=approval_min,
    )


@dataclass(frozen=True)
class BulkRun:
    """What one call did. ``status`` is the job's afterwards, or ``busy`` when another
    runner holds it, or ``missing``."""

    job_id: BulkJobId
    status: BulkStatus | NotRun
    processed: int
    moved: int
    skipped: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _replay(
    jobs: BulkStore[Tx], tx: Tx, job: Job, items: Sequence[BulkItem]
) -> tuple[set[str], set[EndpointId]]:
    """Replay one batch; returns the ids actually moved and the endpoints to ring."""
    stale = jobs.replayed_since(tx, job.kind, [i.subject_id for i in items], job.created_at)
    todo = [i.public_id for i in items if i.subject_id not in stale]
    if not todo:
        return set(), set()
    # Each item's audit row names the job and, under the two-person rule, its approver.
    detail = {"bulk_replay": job.public_id}
    if job.reviewer is not None:
        detail["approved_by"] = job.reviewer
    if job.kind == "events":
        return set(jobs.replay_events(tx, todo, job.actor, detail)), set()
    pairs = jobs.replay_deliveries(tx, todo, job.actor, detail)
    return {p for p, _ in pairs}, {EndpointId(e) for _, e in pairs}


def run_bulk_once(
    rt: Runtime,
    job_id: BulkJobId,
    *,
    owner: str | None = None,
    lease_seconds: float = 30.0,
    budget_seconds: float | None = None,
    ring_doorbell: Callable[[], None] | None = None,
    ring_couriers: Callable[[set[EndpointId]], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    store: BulkStore[Any] | None = None,
) -> BulkRun:
    """Run (or continue) one bulk replay; see the module docstring. ``store``: the jobs
    and their items; by default the ones behind ``rt``'s engine."""
    owner = owner or f"bulk-{uuid.uuid4().hex[:12]}"
    jobs = store if store is not None else bulk_store(rt.engine)
    with jobs.begin() as tx:
        job = jobs.claim(tx, job_id, owner, lease_seconds)
        if job is None:
            now = jobs.status(tx, job_id)
            held = now in (BulkStatus.QUEUED, BulkStatus.RUNNING)  # another runner's lease
            return BulkRun(job_id, NotRun.BUSY if held else now or NotRun.MISSING, 0, 0, 0)
    batch = max(1, math.ceil(job.rate / BATCHES_PER_SECOND))
    started, processed, moved = clock(), 0, 0
    status: BulkStatus | NotRun = job.status
    while True:
        # The rate: item n may not start before n / rate seconds into the run.
        wait = started + processed / job.rate - clock()
        if budget_seconds is not None and clock() + max(wait, 0) - started >= budget_seconds:
            with jobs.begin() as tx:
                jobs.release(tx, job_id, owner)
            break
        if wait > 0:
            sleep(wait)
        with jobs.begin() as tx:
            current = jobs.renew(tx, job_id, owner, lease_seconds)
            if current is None:  # cancelled, or the lease was lost
                status = jobs.status(tx, job_id) or NotRun.MISSING
                break
            items = jobs.next_items(tx, job_id, batch)
            moved_ids, endpoints = _replay(jobs, tx, current, items)
            outcomes = {
                i.subject_id: "moved" if i.public_id in moved_ids else "skipped" for i in items
            }
            status = jobs.record(tx, job_id, outcomes).status
        processed += len(items)
        moved += len(moved_ids)
        _ring(ring_doorbell, ring_couriers, moved_ids, endpoints, job.kind)
        if status != BulkStatus.RUNNING:
            break
    log.info(
        "bulk replay %s: %s after %d items (%d moved)",
        job_id,
        status,
        processed,
        moved,
        extra={"bulk_replay": job_id, "outcome": status},
    )
    return BulkRun(job_id, status, processed, moved, processed - moved)


def _ring(
    doorbell: Callable[[], None] | None,
    couriers: Callable[[set[EndpointId]], None] | None,
    moved: set[str],
    endpoints: set[EndpointId],
    kind: str,
) -> None:
    """Best effort, after COMMIT: the sweeper re-rings for anything due anyway."""
    try:
        if kind == "events" and moved and doorbell is not None:
            doorbell()
        if endpoints and couriers is not None:
            couriers(endpoints)
    except Exception as exc:
        log.warning(
            "ring after bulk replay failed: %s",
            exc.__class__.__name__,
            extra={"error_class": type(exc).__name__},
        )


class NotReplayable(InboxError):
    """Only a dead letter can be replayed: quarantined events, failed deliveries."""

    http_status = 409
    code = "not_replayable"
