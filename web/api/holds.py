"""``/api/v1/holds``: legal holds, placed and released (two operators for a tenant-wide one)."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, request

from inbox.services import operations
from web import actions
from web.api import auth, bodies
from web.api.blueprint import api
from web.common import jsonable, not_found


@api.get("/holds")
def list_holds() -> dict[str, Any]:
    """Holds in force (``?all=true``: released ones too), for the token's tenants."""
    every = request.args.get("all", "false").lower() in ("1", "true", "yes")
    found = operations.list_holds(actions.runtime(), auth.scope(), include_released=every)
    return {"data": [jsonable(h.public()) for h in found]}


@api.post("/holds")
def place_hold() -> Response:
    """``{"tenant": T, "reason": R}`` plus at most one of ``source``, ``business_key``
    (a value or a list of values) and ``event`` (an event id)."""
    body = bodies.load(bodies.Hold)
    hold = operations.place_hold(
        actions.runtime(),
        actions.actor(auth.current()),
        body["tenant"],
        body["reason"],
        source=body["source"],
        business_key=body["business_key"],
        event=body["event"],
    )
    resp = jsonify(jsonable(hold.public()))
    resp.status_code = 201
    return resp


@api.get("/holds/<public_id>")
def show_hold(public_id: str) -> dict[str, Any]:
    hold = operations.get_hold(actions.runtime(), public_id, auth.scope())
    if hold is None:
        raise not_found("legal hold")
    shown: dict[str, Any] = jsonable(hold.public())
    return shown


@api.post("/holds/<public_id>/release")
def release_hold(public_id: str) -> dict[str, Any]:
    """End a hold; a tenant-wide one ends on a second operator's release (the first
    asks for it: ``status`` is then ``release requested``)."""
    hold = operations.release_hold(actions.runtime(), actions.actor(auth.current()), public_id)
    shown: dict[str, Any] = jsonable(hold.public())
    return shown
