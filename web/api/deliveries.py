"""``/api/v1/deliveries``: list, show (with attempts), replay a dead letter."""

from __future__ import annotations

import logging
from typing import Any

from inbox.bulk import NotReplayable
from inbox.store import admin
from inbox.store import deliveries as dstore
from inbox.store.tables import DELIVERY_STATES
from web.api import api, auth
from web.api.common import cursor, ext, hook, jsonable, limit, list_filter, not_found, page

log = logging.getLogger(__name__)


@api.get("/deliveries")
def list_deliveries() -> dict[str, Any]:
    size, f = limit(), list_filter(DELIVERY_STATES)
    with ext()["engine"].connect() as conn:
        rows = admin.list_deliveries(conn, auth.scope(), f, size + 1, cursor())
    return page(rows, size)


@api.get("/deliveries/<public_id>")
def show_delivery(public_id: str) -> dict[str, Any]:
    with ext()["engine"].connect() as conn:
        detail = admin.delivery_detail(conn, public_id, auth.scope())
    if detail is None:
        raise not_found("delivery")
    shown: dict[str, Any] = jsonable(detail)
    return shown


@api.post("/deliveries/<public_id>/replay")
def replay_delivery(public_id: str) -> dict[str, Any]:
    """failed → pending with the same webhook-id, audited; 409 for anything else."""
    token = auth.current()
    with ext()["engine"].begin() as conn:
        if admin.visible(conn, "deliveries", public_id, token.tenant_id) is None:
            raise not_found("delivery")
        moved = dstore.replay(conn, [public_id], token.name)
    if not moved:
        raise NotReplayable("Only a failed delivery can be replayed.")
    ring = hook("ring_couriers")
    if ring is not None:
        try:
            ring({endpoint_id for _, endpoint_id in moved})
        except Exception as exc:  # the sweeper re-rings for due deliveries
            log.warning("ringing the couriers failed: %s", exc.__class__.__name__)
    return {"id": public_id, "state": "pending", "replayed": True}
