"""Deliveries: the filtered outbox, one delivery with every attempt, replaying it."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from flask import flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from inbox.domain.states import DELIVERY_STATES, DeliveryState
from inbox.services import operations, reading
from inbox.services.bulk import NotReplayable
from web import actions
from web.common import cursor, encode_cursor, list_filter, not_found
from web.ui.blueprint import ui
from web.ui.session import current, require_operator, scope

PAGE_SIZE = 50
FILTER_KEYS = ("tenant", "endpoint", "state", "type", "since", "until")


@ui.app_template_global()
def deliveries_url(**args: Any) -> str:
    """The deliveries list with these filters (``url_for`` cannot take ``endpoint=``)."""
    query = {k: v for k, v in args.items() if v is not None}
    return url_for("ui.deliveries") + ("?" + urlencode(query) if query else "")


def _filters() -> dict[str, Any]:
    return {k: v for k in FILTER_KEYS if (v := request.args.get(k, "").strip())}


@ui.get("/deliveries")
def deliveries() -> str:
    f, before = list_filter(DELIVERY_STATES), cursor()
    rows = reading.list_deliveries(actions.runtime(), scope(), f, PAGE_SIZE + 1, before)
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    filters = _filters()
    older = None
    if more and rows:
        older = deliveries_url(**filters, cursor=encode_cursor(rows[-1].id))
    return render_template(
        "ui/deliveries.html",
        rows=rows,
        filters=filters,
        states=DELIVERY_STATES,
        older=older,
        paged=before is not None,
    )


@ui.get("/deliveries/<public_id>")
def delivery(public_id: str) -> str:
    d = reading.delivery_detail(actions.runtime(), public_id, scope())
    if d is None:
        raise not_found("delivery")
    return render_template("ui/delivery.html", d=d, event_id=_event_arg())


def _event_arg() -> str | None:
    """The event page a delivery was opened from (to return to it)."""
    value = request.values.get("event", "")
    return value if value.startswith("evt_") and value.isascii() else None


@ui.get("/deliveries/<public_id>/replay")
def confirm_delivery_replay(public_id: str) -> str:
    require_operator()
    d = reading.delivery_detail(actions.runtime(), public_id, scope())
    if d is None:
        raise not_found("delivery")
    if d.state != DeliveryState.FAILED:
        raise NotReplayable("Only a failed delivery can be replayed.")
    event_id = _event_arg()
    back = url_for("ui.delivery", public_id=public_id, event=event_id)
    return render_template(
        "ui/confirm.html",
        what="delivery",
        subject=d,
        action=url_for("ui.replay_delivery", public_id=public_id),
        back=back,
        extra={"event": event_id} if event_id else {},
    )


@ui.post("/deliveries/<public_id>/replay")
def replay_delivery(public_id: str) -> Response:
    """failed → pending with the same webhook-id, audited; 409 for anything else."""
    operations.replay_delivery(actions.runtime(), actions.actor(current()), public_id)
    flash(f"Delivery {public_id} replayed with the same webhook-id.")
    event_id = _event_arg()
    if event_id is not None:
        return redirect(url_for("ui.event", public_id=event_id))
    return redirect(url_for("ui.delivery", public_id=public_id))
