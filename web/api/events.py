"""``/api/v1/events``: list, show, replay."""

from __future__ import annotations

import logging
from typing import Any

from inbox.bulk import NotReplayable
from inbox.store import admin, operator
from inbox.store.tables import STATES
from web.api import api, auth
from web.api.common import cursor, ext, jsonable, limit, list_filter, not_found, page

log = logging.getLogger(__name__)


@api.get("/events")
def list_events() -> dict[str, Any]:
    size, f = limit(), list_filter(STATES)
    with ext()["engine"].connect() as conn:
        rows = admin.list_events(conn, auth.scope(), f, size + 1, cursor())
    return page(rows, size)


@api.get("/events/<public_id>")
def show_event(public_id: str) -> dict[str, Any]:
    with ext()["engine"].connect() as conn:
        detail = admin.event_detail(conn, public_id, auth.scope())
    if detail is None:
        raise not_found("event")
    shown: dict[str, Any] = jsonable(detail)
    return shown


@api.post("/events/<public_id>/replay")
def replay_event(public_id: str) -> dict[str, Any]:
    """quarantined → received, audited with the token's name; 409 for anything else."""
    token = auth.current()
    with ext()["engine"].begin() as conn:
        if admin.visible(conn, "events", public_id, token.tenant_id) is None:
            raise not_found("event")
        moved = operator.replay(conn, [public_id], token.name)
    if not moved:
        raise NotReplayable("Only a quarantined event can be replayed.")
    try:
        ext()["doorbell"]()
    except Exception as exc:  # the sweeper re-rings for due events
        log.warning("doorbell failed: %s", exc.__class__.__name__)
    return {"id": public_id, "state": "received", "replayed": True}
