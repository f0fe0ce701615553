"""Events: the filtered list, one event in full, replaying an event."""

from __future__ import annotations

from typing import Any

from flask import flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from inbox.domain.states import REPLAYABLE, STATES, DeliveryState, EventState
from inbox.services import operations, reading
from inbox.services.bulk import NotReplayable
from web import actions
from web.common import cursor, encode_cursor, list_filter, not_found
from web.ui.blueprint import ui
from web.ui.display import pretty_body
from web.ui.session import current, require_operator, scope
from web.ui.timeline import event_timeline

PAGE_SIZE = 50
FILTER_KEYS = ("tenant", "source", "state", "type", "untyped", "error", "since", "until")


def _filters() -> dict[str, Any]:
    return {k: v for k in FILTER_KEYS if (v := request.args.get(k, "").strip())}


@ui.get("/events")
def events() -> str:
    f, before = list_filter(STATES), cursor()
    found = reading.events_page(actions.runtime(), scope(), f, PAGE_SIZE + 1, before)
    rows, dead = found.rows, found.failed_callbacks
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    filters = _filters()
    older = None
    if more and rows:
        older = url_for("ui.events", **filters, cursor=encode_cursor(rows[-1].id))
    return render_template(
        "ui/events.html",
        rows=rows,
        dead=dead,
        filters=filters,
        states=STATES,
        older=older,
        paged=before is not None,
        can_bulk=f.state in (None, EventState.QUARANTINED),
        bulk_filters={k: v for k, v in filters.items() if k != "state"},
    )


@ui.get("/events/<public_id>")
def event(public_id: str) -> str:
    story = reading.event_story(actions.runtime(), public_id, scope())
    if story is None:
        raise not_found("event")
    e, tried = story.event, story.attempts
    dead = [d for d in e.deliveries if d.state == DeliveryState.FAILED]
    return render_template(
        "ui/event.html",
        e=e,
        dead=dead,
        tried=tried,
        timeline=event_timeline(e, tried),
        formatted=pretty_body(e.body, e.content_type or ""),
    )


@ui.get("/events/<public_id>/replay")
def confirm_event_replay(public_id: str) -> str:
    require_operator()
    e = reading.event_detail(actions.runtime(), public_id, scope())
    if e is None:
        raise not_found("event")
    if e.state not in REPLAYABLE:
        raise NotReplayable("Only a quarantined or filtered event can be replayed.")
    return render_template(
        "ui/confirm.html",
        what="event",
        subject=e,
        action=url_for("ui.replay_event", public_id=public_id),
        back=url_for("ui.event", public_id=public_id),
        extra={},
    )


@ui.post("/events/<public_id>/skip")
def skip_lane(public_id: str) -> Response:
    """Let the event's ordered lane move on without it: audited with the reason; a second
    operator confirms when many events wait behind it."""
    require_operator()
    done = operations.skip_lane(
        actions.runtime(), actions.actor(current()), public_id, request.form.get("reason")
    )
    if done.status == "skipped":
        flash(f"Lane moved on: {done.held} events behind {public_id} run now.")
    else:
        flash(f"Skip asked: {done.held} events wait behind it, another operator confirms.")
    return redirect(url_for("ui.event", public_id=public_id))


@ui.post("/events/<public_id>/replay")
def replay_event(public_id: str) -> Response:
    """quarantined or filtered → received, audited with the token's name; 409 otherwise."""
    operations.replay_event(actions.runtime(), actions.actor(current()), public_id)
    flash(f"Event {public_id} replayed: it is back in the inbox.")
    return redirect(url_for("ui.event", public_id=public_id))
