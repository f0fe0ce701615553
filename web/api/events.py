"""``/api/v1/events``: list, show, replay, redact."""

from __future__ import annotations

from typing import Any

from inbox.domain.states import STATES, EventState
from inbox.services import operations, reading
from web import actions
from web.api import auth, bodies
from web.api.blueprint import api
from web.common import cursor, jsonable, limit, list_filter, not_found, page


@api.get("/events")
def list_events() -> dict[str, Any]:
    size, f = limit(), list_filter(STATES)
    rows = reading.list_events(actions.runtime(), auth.scope(), f, size + 1, cursor())
    return page(rows, size)


@api.get("/events/<public_id>")
def show_event(public_id: str) -> dict[str, Any]:
    detail = reading.event_detail(actions.runtime(), public_id, auth.scope())
    if detail is None:
        raise not_found("event")
    shown: dict[str, Any] = jsonable(detail.public())
    return shown


@api.post("/events/<public_id>/replay")
def replay_event(public_id: str) -> dict[str, Any]:
    """quarantined or filtered → received, audited with the token's name; 409 otherwise."""
    operations.replay_event(actions.runtime(), actions.actor(auth.current()), public_id)
    return {"id": public_id, "state": EventState.RECEIVED, "replayed": True}


@api.post("/events/<public_id>/redact")
def redact_event(public_id: str) -> dict[str, Any]:
    """``{"reason": R}``: delete the event's raw body, keep its SHA-256 and every row;
    audited with the token's name. 409 while a legal hold covers it or it is unfinished."""
    reason = bodies.load(bodies.Redact)["reason"]
    done = operations.redact(actions.runtime(), actions.actor(auth.current()), public_id, reason)
    shown: dict[str, Any] = done.public()
    return shown
