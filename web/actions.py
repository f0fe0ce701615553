"""Operator actions shared by the admin API and the console: checked, audited, rung."""

from __future__ import annotations

import logging

from sqlalchemy import Connection

from inbox.domain import callbacks
from inbox.domain.errors import BadRequest, NotFound
from inbox.domain.idempotency import validate_key
from inbox.domain.records import Endpoint
from inbox.services import bulk, preview
from inbox.services.bulk import NotReplayable
from inbox.store.reads import admin
from inbox.store.write import bulk as bulk_store
from inbox.store.write import bulk_review, operator
from inbox.store.write import deliveries as dstore
from inbox.store.write import endpoints as estore
from inbox.store.write.tokens import Token
from web.common import not_found
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
        log.warning(
            "%s failed: %s", name, exc.__class__.__name__, extra={"error_class": type(exc).__name__}
        )


def replay_event(token: Token, public_id: str) -> None:
    """quarantined or filtered → received, audited with the token's name; 404 / 409 otherwise."""
    with services().engine.begin() as conn:
        if admin.visible(conn, "events", public_id, token.tenant_id) is None:
            raise not_found("event")
        moved = operator.replay(conn, [public_id], token.name)
    if not moved:
        raise NotReplayable("Only a quarantined or filtered event can be replayed.")
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


def preview_bulk_replay(
    token_name: str, scope: int | None, req: bulk.BulkRequest
) -> preview.Preview:
    """A bulk replay's dry run over what its filter matches now; writes only its audit row."""
    if req.kind != "events":
        raise BadRequest("dry_run previews replays of events (kind events)")
    reg = preview.load_playbooks(services().settings.playbook_modules)
    with services().engine.begin() as conn:
        found = preview.preview_filter(conn, scope, req.match, reg)
        preview.audit(conn, token_name, found, filter=req.stored_filter)
    return found


def preview_job(token_name: str, job: bulk_store.Job) -> preview.Preview:
    """What an approver sees: the plan of the job's snapshotted events, audited."""
    reg = preview.load_playbooks(services().settings.playbook_modules)
    with services().engine.begin() as conn:
        found = preview.preview_job(conn, job.id, reg)
        preview.audit(conn, token_name, found, bulk_replay=job.public_id, bulk_replay_id=job.id)
    return found


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


def _endpoint(conn: Connection, token: Token, public_id: str) -> Endpoint:
    try:
        ep = estore.get_endpoint(conn, public_id)
    except NotFound:
        raise not_found("endpoint") from None
    if token.tenant_id is not None and ep.tenant_id != token.tenant_id:
        raise not_found("endpoint")
    return ep


def set_endpoint_enabled(token: Token, public_id: str, enabled: bool) -> None:
    """Disable (nothing is sent; deliveries wait) or enable (the backlog goes out)."""
    with services().engine.begin() as conn:
        ep = _endpoint(conn, token, public_id)
        reason = f"disabled by {token.name}"
        estore.set_enabled(conn, ep.id, enabled, None if enabled else reason)
        estore.audit(conn, token.name, "enable" if enabled else "disable", ep)
    if enabled:
        _ring("ring_couriers", {ep.id})


def rotate_endpoint_secret(token: Token, public_id: str) -> str:
    """Add a signing secret; during the overlap every active secret signs. Returns it."""
    secret = callbacks.new_secret()
    with services().engine.begin() as conn:
        ep = _endpoint(conn, token, public_id)
        estore.add_secret(conn, ep, secret)
        estore.audit(conn, token.name, "rotate", ep)
    return secret


def finish_endpoint_rotation(token: Token, public_id: str) -> int:
    """End the overlap: only the newest secret signs. Returns how many were revoked."""
    with services().engine.begin() as conn:
        ep = _endpoint(conn, token, public_id)
        revoked = estore.finish_rotation(conn, ep.id)
        estore.audit(conn, token.name, "finish rotation", ep)
    return revoked
