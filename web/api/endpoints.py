"""``/api/v1/endpoints``: callback endpoints' state (the one definition the console, the CLI
and /metrics show), and the operator's levers: disable, enable, pause, resume, limits,
ordered delivery, discarding what a stopped endpoint holds (two operators past a
threshold), and deleting it (which asks what becomes of what it holds)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flask import request

from inbox.domain.errors import BadRequest
from inbox.domain.held import Discard
from inbox.domain.records import TenantId
from inbox.services import endpoint_delete, endpoint_state, reading
from inbox.services.endpoint_state import Changed
from web import actions
from web.api import auth, bodies
from web.api.blueprint import api
from web.common import jsonable, not_found


@api.get("/endpoints")
def list_endpoints() -> dict[str, Any]:
    found = reading.endpoint_statuses(actions.runtime(), auth.scope())
    return {"data": [jsonable(s.public()) for s in found]}


@api.get("/endpoints/<public_id>")
def show_endpoint(public_id: str) -> dict[str, Any]:
    found = reading.endpoint_statuses(actions.runtime(), auth.scope(), public_id)
    if not found:
        raise not_found("endpoint")
    shown: dict[str, Any] = jsonable(found[0].public())
    return shown


def _who() -> tuple[str, TenantId | None]:
    who = actions.actor(auth.current())
    return who.name, who.scope


def _changed(done: Changed) -> dict[str, Any]:
    return asdict(done)


@api.post("/endpoints/<public_id>/disable")
def disable_endpoint(public_id: str) -> dict[str, Any]:
    """Nothing is sent to it; its deliveries are held (never dropped)."""
    rt = actions.runtime()
    return _changed(endpoint_state.set_enabled(rt, *_who(), public_id, False))


@api.post("/endpoints/<public_id>/enable")
def enable_endpoint(public_id: str) -> dict[str, Any]:
    """Its held deliveries go out, in their original order (unless it is also paused)."""
    rt = actions.runtime()
    return _changed(endpoint_state.set_enabled(rt, *_who(), public_id, True))


@api.post("/endpoints/<public_id>/pause")
def pause_endpoint(public_id: str) -> dict[str, Any]:
    rt = actions.runtime()
    return _changed(endpoint_state.set_paused(rt, *_who(), public_id, True))


@api.post("/endpoints/<public_id>/resume")
def resume_endpoint(public_id: str) -> dict[str, Any]:
    rt = actions.runtime()
    return _changed(endpoint_state.set_paused(rt, *_who(), public_id, False))


def _discard(done: Discard) -> dict[str, Any]:
    out = asdict(done)
    out["id"] = out.pop("public_id")
    out["status"] = str(done.status)
    return out


@api.post("/endpoints/<public_id>/discard")
def discard_held(public_id: str) -> dict[str, Any]:
    """``{"reason": R}``: discard the held deliveries (each a dead letter, audited); past
    INBOX_HELD_DISCARD_APPROVAL_MIN it awaits another operator's approval."""
    reason = bodies.load(bodies.Discard)["reason"]
    rt = actions.runtime()
    return _discard(endpoint_state.discard_held(rt, *_who(), public_id, reason))


@api.post("/endpoints/<public_id>/discard/approve")
def approve_discard(public_id: str) -> dict[str, Any]:
    """Another operator than the one who asked approves the awaiting discard (403 else)."""
    return _discard(endpoint_state.approve_discard(actions.runtime(), *_who(), public_id))


@api.post("/endpoints/<public_id>/discard/withdraw")
def withdraw_discard(public_id: str) -> dict[str, Any]:
    return _discard(endpoint_state.withdraw_discard(actions.runtime(), *_who(), public_id))


@api.post("/endpoints/<public_id>/limits")
def set_limits(public_id: str) -> dict[str, Any]:
    """``{"rate_per_second": R | null, "max_in_flight": N}`` (either or both): limits that
    hold across every courier process; the backlog waits."""
    body = bodies.load(bodies.Limits)
    if not body:
        raise BadRequest('The body must be {"rate_per_second": ..., "max_in_flight": ...}.')
    rate = body.get("rate_per_second", "keep")
    slots = body.get("max_in_flight")
    endpoint_state.set_limits(actions.runtime(), *_who(), public_id, rate=rate, max_in_flight=slots)
    return show_endpoint(public_id)


@api.post("/endpoints/<public_id>/order")
def set_ordered(public_id: str) -> dict[str, Any]:
    """``{"ordered": true|false}``: one delivery in flight, the next once the previous is
    delivered or dead (in the order made), across every courier process."""
    ordered = bodies.load(bodies.Order)["ordered"]
    endpoint_state.set_ordered(actions.runtime(), *_who(), public_id, ordered)
    return show_endpoint(public_id)


@api.delete("/endpoints/<public_id>")
def delete_endpoint(public_id: str) -> tuple[dict[str, Any], int]:
    """A soft delete. ``{"held": "discard", "reason": R}`` (a JSON body, or the same as
    query parameters) when it has held or waiting deliveries, else 409 naming them. 200
    when deleted; 202 when the discard awaits a second operator (deleted on approval)."""
    given = request.get_json(silent=True) if request.get_data() else dict(request.args)
    body = bodies.check(bodies.Delete, given)
    held, reason = body["held"], body["reason"]
    done = endpoint_delete.delete_endpoint(actions.runtime(), *_who(), public_id, held, reason)
    out: dict[str, Any] = {
        "endpoint": done.endpoint,
        "deleted": done.deleted,
        "discard": _discard(done.discard) if done.discard is not None else None,
    }
    return out, 200 if done.deleted else 202
