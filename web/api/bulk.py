"""``/api/v1/replays``: bulk replays of dead letters, their progress, cancelling."""

from __future__ import annotations

import logging
from typing import Any

from flask import Response, jsonify, request

from inbox import bulk
from inbox.idempotency import validate_key
from inbox.store import bulk as store
from web.api import api, auth
from web.api.common import ext, hook, jsonable, not_found

log = logging.getLogger(__name__)


@api.post("/replays")
def create_replay() -> Response:
    """Snapshot the matching dead letters into a job; a runner replays them at ``rate``."""
    token = auth.current()
    req = bulk.parse_request(request.get_json(silent=True))
    key = request.headers.get("Idempotency-Key")
    if key is not None:
        validate_key(key)
    with ext()["engine"].begin() as conn:
        job, created = bulk.create(conn, req, token.tenant_id, token.name, key)
    if created and job.status == "queued":
        start = hook("start_bulk_replay")
        if start is not None:
            try:
                start(job.id)
            except Exception as exc:  # the sweeper starts queued jobs too
                log.warning("starting bulk replay failed: %s", exc.__class__.__name__)
    resp = jsonify({"id": job.public_id, "status": job.status, "total": job.total})
    resp.status_code = 202
    if not created:
        resp.headers["Idempotent-Replayed"] = "true"
    return resp


@api.get("/replays/<public_id>")
def show_replay(public_id: str) -> dict[str, Any]:
    with ext()["engine"].connect() as conn:
        job = store.get_job(conn, public_id, auth.scope())
    if job is None:
        raise not_found("bulk replay")
    shown: dict[str, Any] = jsonable(job.public())
    return shown


@api.post("/replays/<public_id>/cancel")
def cancel_replay(public_id: str) -> dict[str, Any]:
    """Stop a job; the runner stops before its next batch. 409 once it has completed."""
    token = auth.current()
    with ext()["engine"].begin() as conn:
        job = store.cancel(conn, public_id, token.tenant_id, token.name)
    if job is None:
        raise not_found("bulk replay")
    shown: dict[str, Any] = jsonable(job.public())
    return shown
