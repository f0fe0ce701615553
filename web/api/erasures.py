"""``/api/v1/erasures``: erase payloads by destroying their keys (two operators for a tenant)."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify

from inbox.services import erasure
from web import actions
from web.api import auth, bodies
from web.api.blueprint import api
from web.common import jsonable, not_found


@api.get("/erasures")
def list_erasures() -> dict[str, Any]:
    """The newest erasures, for the token's tenants."""
    found = erasure.listing(actions.runtime(), auth.scope())
    return {"data": [jsonable(x.public()) for x in found]}


@api.post("/erasures")
def erase() -> Response:
    """``{"tenant": T, "reason": R, "subject": S}`` erases one subject's payloads now;
    without ``subject``, asks for a tenant-wide erasure that another operator confirms."""
    body = bodies.load(bodies.Erase)
    done = erasure.erase(
        actions.runtime(),
        actions.actor(auth.current()),
        body["tenant"],
        body["reason"],
        subject=body["subject"],
    )
    resp = jsonify(jsonable(done.public()))
    resp.status_code = 201 if done.status == "done" else 202
    return resp


@api.get("/erasures/<public_id>")
def show_erasure(public_id: str) -> dict[str, Any]:
    found = erasure.get(actions.runtime(), public_id, auth.scope())
    if found is None:
        raise not_found("erasure")
    shown: dict[str, Any] = jsonable(found.public())
    return shown


@api.post("/erasures/<public_id>/approve")
def approve_erasure(public_id: str) -> dict[str, Any]:
    """A second operator confirms a tenant-wide erasure: the keys are destroyed."""
    done = erasure.review(actions.runtime(), actions.actor(auth.current()), public_id, approve=True)
    shown: dict[str, Any] = jsonable(done.public())
    return shown


@api.post("/erasures/<public_id>/reject")
def reject_erasure(public_id: str) -> dict[str, Any]:
    done = erasure.review(
        actions.runtime(), actions.actor(auth.current()), public_id, approve=False
    )
    shown: dict[str, Any] = jsonable(done.public())
    return shown
