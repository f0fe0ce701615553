"""Operator actions shared by the admin API and the console: checked, audited, rung."""

from __future__ import annotations

import logging

from inbox.domain.errors import BadRequest
from inbox.domain.idempotency import validate_key
from inbox.services import bulk
from inbox.services.bulk import NotReplayable
from inbox.store import admin, bulk_review, operator
from inbox.store import bulk as bulk_store
from inbox.store import deliveries as dstore
from inbox.store.tokens import Token
from web.api.common import not_found
from web.services import services

log = logging.getLogger(__name__)

MAX_NOTE = 500


def _ring(name: str, *args: object) -> None:
    """Best effort: the sweeper re-rings for anything due."""
    ring = getattr(services(), name)
    if ring is None:
        return
    try:
        ring(*args)
    except Exception as exc:
        log.warning("%s failed: %s", name, exc.__class__.__name__)


def replay_event(token: Token, public_id: str) -> None:
    """quarantined → received, audited with the token's name; 404 / 409 otherwise."""
    with services().engine.begin() as conn:
        if admin.visible(conn, "events", public_id, token.tenant_id) is None:
            raise not_found("event")
        moved = operator.replay(conn, [public_id], token.name)
    if not moved:
        raise NotReplayable("Only a quarantined event can be replayed.")
    _ring("doorbell")


def replay_delivery(token: Token, public_id: str) -> None:
    """failed → pending with the same webhook-id, audited; 404 / 409 otherwise."""
    with services().engine.begin() as conn:
        if admin.visible(conn, "deliveries", public_id, token.tenant_id) is None:
            raise not_found("delivery")
        moved = dstore.replay(conn, [public_id], token.name)
    if not moved:
        raise NotReplayable("Only a failed delivery can be replayed.")
    _ring("ring_couriers", {endpoint_id for _, endpoint_id in moved})


def start_bulk_replay(
    token: Token, req: bulk.BulkRequest, key: str | None
) -> tuple[bulk_store.Job, bool]:
    """Create (or, for the same key, find) a bulk replay job and start its runner."""
    if key is not None:
        validate_key(key)
    approval_min = services().settings.bulk_approval_min
    with services().engine.begin() as conn:
        job, created = bulk.create(conn, req, token.tenant_id, token.name, key, approval_min)
    if created and job.status == "queued":
        _ring("start_bulk_replay", job.id)
    return job, created


def review_bulk_replay(
    token: Token, public_id: str, *, approve: bool, note: str | None
) -> bulk_store.Job:
    """The two-person rule: another operator approves (the runner starts) or rejects it."""
    if note is not None and len(note) > MAX_NOTE:
        raise BadRequest(f"note must be at most {MAX_NOTE} characters")
    with services().engine.begin() as conn:
        job = bulk_review.review(
            conn, public_id, token.tenant_id, token.name, approve=approve, note=note or None
        )
    if job is None:
        raise not_found("bulk replay")
    if approve:
        _ring("start_bulk_replay", job.id)
    return job
