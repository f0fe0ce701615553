"""``/api/v1/deliveries``: list, show (with attempts), replay a dead letter."""

from __future__ import annotations

from typing import Any

from inbox.domain.states import DELIVERY_STATES, DeliveryState
from inbox.services import operations, reading
from web import actions
from web.api import auth
from web.api.blueprint import api
from web.common import cursor, jsonable, limit, list_filter, not_found, page


@api.get("/deliveries")
def list_deliveries() -> dict[str, Any]:
    size, f = limit(), list_filter(DELIVERY_STATES)
    rows = reading.list_deliveries(actions.runtime(), auth.scope(), f, size + 1, cursor())
    return page(rows, size)


@api.get("/deliveries/<public_id>")
def show_delivery(public_id: str) -> dict[str, Any]:
    detail = reading.delivery_detail(actions.runtime(), public_id, auth.scope())
    if detail is None:
        raise not_found("delivery")
    shown: dict[str, Any] = jsonable(detail.public())
    return shown


@api.post("/deliveries/<public_id>/replay")
def replay_delivery(public_id: str) -> dict[str, Any]:
    """failed → pending with the same webhook-id, audited; 409 for anything else."""
    operations.replay_delivery(actions.runtime(), actions.actor(auth.current()), public_id)
    return {"id": public_id, "state": DeliveryState.PENDING, "replayed": True}
