"""Endpoints: health (success rate, latency, last error, circuit), and the operator's
levers: disable, enable, pause, resume, discard what it holds, limits, ordered delivery,
delete (which asks what becomes of what it holds), rotate the signing secret and end the
overlap."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from inbox.domain.errors import BadRequest
from inbox.domain.records import TenantId
from inbox.services import endpoint_delete, endpoint_state, operations, reading
from inbox.store.reads import endpoint_health as health_reads
from web import actions
from web.common import not_found
from web.ui.blueprint import ui
from web.ui.session import current, scope

RECENT = 20


@ui.get("/endpoints")
def endpoints() -> str:
    rows = reading.endpoint_health(actions.runtime(), scope())
    return render_template("ui/endpoints.html", rows=rows, hours=health_reads.HEALTH_HOURS)


def _page(public_id: str, secret: str | None = None) -> str:
    found = reading.endpoint_page(actions.runtime(), public_id, scope(), RECENT)
    if found is None:
        raise not_found("endpoint")
    return render_template(
        "ui/endpoint.html",
        ep=found.endpoint,
        recent=found.recent,
        audit=found.audit,
        secret=secret,
        hours=health_reads.HEALTH_HOURS,
    )


@ui.get("/endpoints/<public_id>")
def endpoint(public_id: str) -> str:
    return _page(public_id)


@ui.post("/endpoints/<public_id>/disable")
def disable_endpoint(public_id: str) -> Response:
    done = endpoint_state.set_enabled(actions.runtime(), *_who(), public_id, False)
    flash(
        f"Endpoint {public_id} disabled: nothing is sent to it; {done.held} more deliveries held."
    )
    return redirect(url_for("ui.endpoint", public_id=public_id))


@ui.post("/endpoints/<public_id>/enable")
def enable_endpoint(public_id: str) -> Response:
    done = endpoint_state.set_enabled(actions.runtime(), *_who(), public_id, True)
    flash(_released(public_id, "enabled", done))
    return redirect(url_for("ui.endpoint", public_id=public_id))


@ui.post("/endpoints/<public_id>/pause")
def pause_endpoint(public_id: str) -> Response:
    done = endpoint_state.set_paused(actions.runtime(), *_who(), public_id, True)
    flash(f"Endpoint {public_id} paused: nothing is sent to it; {done.held} more deliveries held.")
    return redirect(url_for("ui.endpoint", public_id=public_id))


@ui.post("/endpoints/<public_id>/resume")
def resume_endpoint(public_id: str) -> Response:
    done = endpoint_state.set_paused(actions.runtime(), *_who(), public_id, False)
    flash(_released(public_id, "resumed", done))
    return redirect(url_for("ui.endpoint", public_id=public_id))


@ui.post("/endpoints/<public_id>/discard")
def discard_held(public_id: str) -> Response:
    """Ask to discard the held deliveries (a reason is required), approve the discard
    another operator asked for, or withdraw it."""
    rt, who, action = actions.runtime(), _who(), request.form.get("action", "ask")
    if action == "approve":
        done = endpoint_state.approve_discard(rt, *who, public_id)
    elif action == "withdraw":
        done = endpoint_state.withdraw_discard(rt, *who, public_id)
    else:
        done = endpoint_state.discard_held(rt, *who, public_id, request.form.get("reason"))
    if done.status == "awaiting":
        flash(f"Discard of {done.held} held deliveries awaits a second operator's approval.")
    elif done.status == "withdrawn":
        flash("Discard withdrawn: nothing was discarded.")
    else:
        flash(f"{done.discarded} held deliveries discarded (dead letters, audited).")
    return redirect(url_for("ui.endpoint", public_id=public_id))


@ui.post("/endpoints/<public_id>/limits")
def set_limits(public_id: str) -> Response:
    """Its rate (empty: no limit) and in-flight limit, across every courier process."""
    raw_rate = (request.form.get("rate") or "").strip()
    raw_slots = (request.form.get("max_in_flight") or "").strip()
    try:
        rate = float(raw_rate) if raw_rate else None
        slots = int(raw_slots) if raw_slots else None
    except ValueError:
        raise BadRequest("The rate is a number and the in-flight limit a whole number.") from None
    ep = endpoint_state.set_limits(
        actions.runtime(), *_who(), public_id, rate=rate, max_in_flight=slots
    )
    shown = f"{ep.rate_per_second:g}/s" if ep.rate_per_second else "no rate limit"
    flash(f"Limits of {public_id}: {shown}, at most {ep.max_in_flight} in flight.")
    return redirect(url_for("ui.endpoint", public_id=public_id))


@ui.post("/endpoints/<public_id>/order")
def order_endpoint(public_id: str) -> Response:
    """Ordered delivery on (``ordered=on``) or off."""
    wanted = request.form.get("ordered")
    if wanted not in ("on", "off"):
        raise BadRequest("ordered is on or off.")
    ep = endpoint_state.set_ordered(actions.runtime(), *_who(), public_id, wanted == "on")
    flash(
        f"Endpoint {public_id}: "
        + ("ordered, one delivery in flight at a time." if ep.ordered else "not ordered.")
    )
    return redirect(url_for("ui.endpoint", public_id=public_id))


@ui.post("/endpoints/<public_id>/delete")
def delete_endpoint(public_id: str) -> Response:
    """Delete it; with held or waiting deliveries only with ``held=discard`` and a reason."""
    done = endpoint_delete.delete_endpoint(
        actions.runtime(),
        *_who(),
        public_id,
        request.form.get("held") or None,
        request.form.get("reason") if request.form.get("held") else None,
    )
    if done.deleted:
        gone = f" {done.discard.discarded} held deliveries discarded." if done.discard else ""
        flash(f"Endpoint {public_id} deleted: it is sent nothing.{gone}")
        return redirect(url_for("ui.endpoints"))
    flash(
        f"Endpoint {public_id} disabled; the discard of its held deliveries awaits a second"
        " operator's approval, then it is deleted."
    )
    return redirect(url_for("ui.endpoint", public_id=public_id))


def _who() -> tuple[str, TenantId | None]:
    """Who acts (audited by name), and the tenant they are limited to."""
    who = actions.actor(current())
    return who.name, who.scope


def _released(public_id: str, word: str, done: endpoint_state.Changed) -> str:
    if not done.sends:
        return f"Endpoint {public_id} {word}, but it is still stopped: its deliveries stay held."
    return f"Endpoint {public_id} {word}: {done.released} held deliveries go out now, in order."


@ui.post("/endpoints/<public_id>/rotate")
def rotate_endpoint(public_id: str) -> str:
    """The new secret is shown once, on this answer (never stored in the session)."""
    secret = operations.rotate_endpoint_secret(
        actions.runtime(), actions.actor(current()), public_id
    )
    return _page(public_id, secret)


@ui.post("/endpoints/<public_id>/finish-rotation")
def finish_endpoint_rotation(public_id: str) -> Response:
    revoked = operations.finish_endpoint_rotation(
        actions.runtime(), actions.actor(current()), public_id
    )
    flash(f"Rotation finished: {revoked} older secret(s) revoked; only the newest signs.")
    return redirect(url_for("ui.endpoint", public_id=public_id))
