"""Bulk replays: confirm a filter, start the job, approve or reject it, watch it, cancel it."""

from __future__ import annotations

import secrets
from typing import Any

from flask import flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from inbox.domain import approval
from inbox.domain.approval import BulkStatus
from inbox.domain.errors import BadRequest
from inbox.services import bulk, reading, replays
from inbox.services.replays import Job
from web import actions
from web.common import jsonable, not_found
from web.services import services
from web.ui import outcomes
from web.ui.blueprint import ui
from web.ui.session import current, require_operator, scope

# The event-list filters a bulk replay takes over (its state is always quarantined).
BULK_KEYS = ("tenant", "source", "type", "untyped", "error", "since", "until")
PREVIEW = 500
# Events shown step by step on a page (the totals count every planned event).
SHOWN = 20
FINISHED = tuple(str(s) for s in approval.FINISHED)


def _filter(values: Any) -> dict[str, str]:
    return {k: v for k in BULK_KEYS if (v := (values.get(k) or "").strip())}


def progress(job: Job) -> dict[str, Any]:
    """What the progress bar shows: the job as the API shows it, plus a percentage and
    what the moved items became since (see ``web.ui.outcomes``)."""
    shown: dict[str, Any] = jsonable(job.public())
    if job.total:
        shown["percent"] = min(100, job.done * 100 // job.total)
    else:
        shown["percent"] = 100 if job.status == BulkStatus.COMPLETED else 0
    shown["finished"] = job.status in FINISHED
    shown.update(outcomes.shown(job, reading.replay_outcomes(actions.runtime(), job)))
    return shown


@ui.get("/replays/new")
def new_replay() -> str:
    """The confirmation: what the filter matches now, and the rate."""
    require_operator()
    raw = _filter(request.args)
    req = bulk.parse_request({"kind": "events", "filter": raw})
    sample = reading.list_events(actions.runtime(), scope(), req.match, PREVIEW + 1, None)
    plan = replays.preview_bulk_replay(actions.runtime(), actions.actor(current()), req)
    return render_template(
        "ui/replay_new.html",
        filters=raw,
        matching=len(sample),
        more=len(sample) > PREVIEW,
        sample=sample[:5],
        rate=bulk.DEFAULT_RATE,
        max_rate=bulk.MAX_RATE,
        approval_min=services().settings.bulk_approval_min,
        key=secrets.token_urlsafe(18),
        plan=plan,
        shown=SHOWN,
    )


@ui.post("/replays")
def create_replay() -> Response:
    """Snapshot the matching quarantined events into a job, start it, show its progress.

    The form carries a one-time key, so submitting it twice makes one job.
    """
    raw = _filter(request.form)
    try:
        rate = int(request.form.get("rate", bulk.DEFAULT_RATE))
    except ValueError:
        raise BadRequest("rate must be a whole number") from None
    req = bulk.parse_request({"kind": "events", "filter": raw, "rate": rate})
    job, _ = replays.start(
        actions.runtime(), actions.actor(current()), req, request.form.get("key") or None
    )
    return redirect(url_for("ui.replay", public_id=job.public_id))


def _job(public_id: str) -> Job:
    job = replays.get_job(actions.runtime(), public_id, scope())
    if job is None:
        raise not_found("bulk replay")
    return job


@ui.get("/replays/<public_id>")
def replay(public_id: str) -> str:
    job = _job(public_id)
    may_approve = job.actor != current().name
    # The approver sees what they would start (and the look is audited).
    plan = None
    if job.kind == "events" and job.status == BulkStatus.AWAITING_APPROVAL:
        plan = replays.preview_job(actions.runtime(), actions.actor(current()), job)
    return render_template(
        "ui/replay.html",
        job=job,
        p=progress(job),
        may_approve=may_approve,
        plan=plan,
        shown=SHOWN,
    )


@ui.get("/replays/<public_id>/progress")
def replay_progress(public_id: str) -> dict[str, Any]:
    """Polled every second by the progress bar."""
    return progress(_job(public_id))


@ui.post("/replays/<public_id>/cancel")
def cancel_replay(public_id: str) -> Response:
    job = replays.cancel(actions.runtime(), actions.actor(current()), public_id)
    flash(f"Bulk replay {public_id} cancelled after {job.done} of {job.total}.")
    return redirect(url_for("ui.replay", public_id=public_id))


@ui.post("/replays/<public_id>/approve")
def approve_replay(public_id: str) -> Response:
    """The two-person rule: an operator other than the requester starts the job."""
    note = (request.form.get("note") or "").strip() or None
    job = replays.review(
        actions.runtime(), actions.actor(current()), public_id, approve=True, note=note
    )
    flash(f"Bulk replay {public_id} approved; {job.total} events will be replayed.")
    return redirect(url_for("ui.replay", public_id=public_id))


@ui.post("/replays/<public_id>/reject")
def reject_replay(public_id: str) -> Response:
    note = (request.form.get("note") or "").strip() or None
    replays.review(actions.runtime(), actions.actor(current()), public_id, approve=False, note=note)
    flash(f"Bulk replay {public_id} rejected; nothing was replayed.")
    return redirect(url_for("ui.replay", public_id=public_id))
