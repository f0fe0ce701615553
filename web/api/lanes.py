"""``/api/v1/lanes``: ordered lanes blocked by a quarantined event, and skipping one.

A replay of the blocker is ``POST /api/v1/events/<id>/replay`` (it runs first, then the
events held behind it)."""

from __future__ import annotations

from typing import Any

from inbox.services import operations
from web import actions
from web.api import auth, bodies
from web.api.blueprint import api
from web.common import jsonable


@api.get("/lanes/blocked")
def list_blocked_lanes() -> dict[str, Any]:
    """The lanes held by a quarantined event, longest blocked first: the event, its error,
    how many events wait behind it, and a skip waiting for a second operator."""
    found = operations.blocked_lanes(actions.runtime(), auth.scope())
    return {"data": [jsonable(b.public()) for b in found]}


@api.post("/events/<public_id>/skip")
def skip_lane(public_id: str) -> dict[str, Any]:
    """``{"reason": R}``: the blocker's lane moves on without it (it stays quarantined);
    audited. Above ``INBOX_LANE_SKIP_APPROVAL_ABOVE`` events held, the first operator's
    call asks (``status``: ``skip requested``) and a second operator's confirms."""
    reason = bodies.load(bodies.Skip)["reason"]
    done = operations.skip_lane(actions.runtime(), actions.actor(auth.current()), public_id, reason)
    shown: dict[str, Any] = done.public()
    return shown
