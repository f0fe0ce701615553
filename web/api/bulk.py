"""``/api/v1/replays``: bulk replays of dead letters, their approval, progress, cancelling."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, request

from inbox.domain.errors import BadRequest
from inbox.services import bulk, replays
from web import actions
from web.api import auth, bodies
from web.api.blueprint import api
from web.common import jsonable, not_found


@api.post("/replays")
def create_replay() -> Response:
    """Snapshot the matching dead letters into a job; a runner replays them at ``rate``.

    With ``"dry_run": true``: what the replay would do, per event and step, instead.
    """
    token = auth.current()
    body = request.get_json(silent=True)
    req = bulk.parse_request(body)
    dry_run = body.get("dry_run", False) if isinstance(body, dict) else False
    if not isinstance(dry_run, bool):
        raise BadRequest("dry_run must be true or false")
    if dry_run:  # the plan, step by step; nothing is written but its audit row
        found = replays.preview_bulk_replay(actions.runtime(), actions.actor(token), req)
        return jsonify(jsonable(found.to_dict()))
    key = request.headers.get("Idempotency-Key")
    job, created = replays.start(actions.runtime(), actions.actor(token), req, key)
    resp = jsonify({"id": job.public_id, "status": job.status, "total": job.total})
    resp.status_code = 202
    if not created:
        resp.headers["Idempotent-Replayed"] = "true"
    return resp


@api.get("/replays/<public_id>")
def show_replay(public_id: str) -> dict[str, Any]:
    job = replays.get_job(actions.runtime(), public_id, auth.scope())
    if job is None:
        raise not_found("bulk replay")
    shown: dict[str, Any] = jsonable(job.public())
    return shown


@api.post("/replays/<public_id>/cancel")
def cancel_replay(public_id: str) -> dict[str, Any]:
    """Stop a job; the runner stops before its next batch. 409 once it has completed."""
    job = replays.cancel(actions.runtime(), actions.actor(auth.current()), public_id)
    shown: dict[str, Any] = jsonable(job.public())
    return shown


def _note() -> str | None:
    note: str | None = bodies.load(bodies.Review, optional=True)["note"]
    return note


@api.post("/replays/<public_id>/approve")
def approve_replay(public_id: str) -> dict[str, Any]:
    """The two-person rule: another operator than the requester starts a waiting job."""
    caller = actions.actor(auth.current())
    job = replays.review(actions.runtime(), caller, public_id, approve=True, note=_note())
    shown: dict[str, Any] = jsonable(job.public())
    return shown


@api.post("/replays/<public_id>/reject")
def reject_replay(public_id: str) -> dict[str, Any]:
    """Refuse a waiting job: nothing is replayed, and the refusal is audited."""
    caller = actions.actor(auth.current())
    job = replays.review(actions.runtime(), caller, public_id, approve=False, note=_note())
    shown: dict[str, Any] = jsonable(job.public())
    return shown
