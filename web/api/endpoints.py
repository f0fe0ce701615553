"""``/api/v1/endpoints``: callback endpoints' state (the one definition the console, the CLI
and /metrics show), and the operator's levers: disable, enable, pause, resume, and
discarding what a stopped endpoint holds (two operators past a threshold)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flask import request

from inbox.domain.errors import BadRequest
from inbox.domain.held import Discard
from inbox.domain.records import TenantId
from inbox.services import endpoint_state
from inbox.services.endpoint_state import Changed
from inbox.store.reads.endpoint_health import statuses
from web import actions
from web.api import auth
from web.api.blueprint import api
from web.common import jsonable, not_found
from web.services import services


@api.get("/endpoints")
def list_endpoints() -> dict[str, Any]:
    with services().engine.connect() as conn:
        found = statuses(conn, auth.scope())
    return {"data": [jsonable(s.public()) for s in found]}


@api.get("/endpoints/<public_id>")
def show_endpoint(public_id: str) -> dict[str, Any]:
    with services().engine.connect() as conn:
        found = statuses(conn, auth.scope(), public_id)
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
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or set(body) - {"reason"}:
        raise BadRequest('The body must be {"reason": "..."}.')
    reason = body.get("reason")
    if not isinstance(reason, str):
        raise BadRequest("reason must be a string.")
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
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or not body or set(body) - {"rate_per_second", "max_in_flight"}:
        raise BadRequest('The body must be {"rate_per_second": ..., "max_in_flight": ...}.')
    rate = body.get("rate_per_second", "keep")
    if isinstance(rate, bool) or not (
        rate is None or rate == "keep" or isinstance(rate, int | float)
    ):
        raise BadRequest("rate_per_second must be a number or null.")
    slots = body.get("max_in_flight")
    if slots is not None and (isinstance(slots, bool) or not isinstance(slots, int)):
        raise BadRequest("max_in_flight must be a whole number.")
    endpoint_state.set_limits(actions.runtime(), *_who(), public_id, rate=rate, max_in_flight=slots)
    return show_endpoint(public_id)
