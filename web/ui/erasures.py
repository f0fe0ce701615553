"""Erasures: erase a subject's payloads (or ask for a tenant's, which another operator
confirms) by destroying their keys; the newest erasures with their status."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from inbox.services import erasure
from web import actions
from web.ui.blueprint import ui
from web.ui.session import current, scope


@ui.get("/erasures")
def erasures() -> str:
    rows = erasure.listing(actions.runtime(), scope())
    return render_template("ui/erasures.html", rows=rows, me=current().name)


@ui.post("/erasures")
def erase() -> Response:
    form = {k: (request.form.get(k) or "").strip() for k in ("tenant", "subject", "reason")}
    done = erasure.erase(
        actions.runtime(),
        actions.actor(current()),
        form["tenant"],
        form["reason"],
        subject=form["subject"] or None,
    )
    if done.status == "done":
        flash(f"Erasure {done.public_id}: {done.events} event payload(s) erased.")
    else:
        flash(f"Erasure {done.public_id} asked: another operator must approve it.")
    return redirect(url_for("ui.erasures"))


@ui.post("/erasures/<public_id>/<verdict>")
def review_erasure(public_id: str, verdict: str) -> Response:
    approve = verdict == "approve"
    done = erasure.review(actions.runtime(), actions.actor(current()), public_id, approve=approve)
    if approve:
        flash(f"Erasure {public_id}: {done.events} event payload(s) erased.")
    else:
        flash(f"Erasure {public_id} rejected: nothing was erased.")
    return redirect(url_for("ui.erasures"))
