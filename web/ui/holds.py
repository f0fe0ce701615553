"""Legal holds: the holds in force, a form to place one, and release (a tenant-wide hold
needs a second operator, as a bulk replay's approval does)."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from inbox.domain.errors import BadRequest
from inbox.services import operations
from web import actions
from web.ui.blueprint import ui
from web.ui.session import current, scope

SUBJECTS = ("tenant", "source", "business_key", "event")


@ui.get("/holds")
def holds() -> str:
    every = request.args.get("all") == "1"
    rows = operations.list_holds(actions.runtime(), scope(), include_released=every)
    return render_template("ui/holds.html", rows=rows, every=every, me=current().name)


@ui.post("/holds")
def place_hold() -> Response:
    """One subject: the tenant, or one of its sources, business keys (one value) or events."""
    form = {k: (request.form.get(k) or "").strip() for k in ("tenant", "subject", "value")}
    kind, value = form["subject"] or "tenant", form["value"] or None
    if kind not in SUBJECTS:
        raise BadRequest(f"subject must be one of {', '.join(SUBJECTS)}")
    if kind != "tenant" and value is None:
        raise BadRequest(f"A {kind.replace('_', ' ')} hold needs its value.")
    hold = operations.place_hold(
        actions.runtime(),
        actions.actor(current()),
        form["tenant"],
        request.form.get("reason") or "",
        source=value if kind == "source" else None,
        business_key=[value] if kind == "business_key" and value else None,
        event=value if kind == "event" else None,
    )
    flash(f"Legal hold {hold.public_id} placed on {hold.subject}.")
    return redirect(url_for("ui.holds"))


@ui.post("/holds/<public_id>/release")
def release_hold(public_id: str) -> Response:
    hold = operations.release_hold(actions.runtime(), actions.actor(current()), public_id)
    if hold.status == "released":
        flash(f"Legal hold {public_id} released: retention may now remove what it kept.")
    else:
        flash(f"Release of {public_id} requested: another operator must release it too.")
    return redirect(url_for("ui.holds"))
