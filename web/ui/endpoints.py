"""Endpoints: health (success rate, latency, last error, circuit), and the operator's
levers: disable, enable, rotate the signing secret and end the overlap."""

from __future__ import annotations

from flask import flash, redirect, render_template, url_for
from werkzeug.wrappers import Response

from inbox.services import operations
from inbox.store.reads import admin, reads
from web import actions
from web.common import not_found
from web.services import services
from web.ui.blueprint import ui
from web.ui.session import current, scope

RECENT = 20


@ui.get("/endpoints")
def endpoints() -> str:
    with services().engine.connect() as conn:
        rows = reads.endpoints(conn, scope())
    return render_template("ui/endpoints.html", rows=rows, hours=reads.HEALTH_HOURS)


def _page(public_id: str, secret: str | None = None) -> str:
    with services().engine.connect() as conn:
        ep = reads.endpoint(conn, public_id, scope())
        if ep is None:
            raise not_found("endpoint")
        recent = admin.list_deliveries(
            conn, scope(), admin.Filter(endpoint=public_id), RECENT, None
        )
        audit = reads.audit_trail(conn, "endpoint", ep.id)
    return render_template(
        "ui/endpoint.html",
        ep=ep,
        recent=recent,
        audit=audit,
        secret=secret,
        hours=reads.HEALTH_HOURS,
    )


@ui.get("/endpoints/<public_id>")
def endpoint(public_id: str) -> str:
    return _page(public_id)


@ui.post("/endpoints/<public_id>/disable")
def disable_endpoint(public_id: str) -> Response:
    operations.set_endpoint_enabled(actions.runtime(), actions.actor(current()), public_id, False)
    flash(f"Endpoint {public_id} disabled: nothing is sent to it; its deliveries wait.")
    return redirect(url_for("ui.endpoint", public_id=public_id))


@ui.post("/endpoints/<public_id>/enable")
def enable_endpoint(public_id: str) -> Response:
    operations.set_endpoint_enabled(actions.runtime(), actions.actor(current()), public_id, True)
    flash(f"Endpoint {public_id} enabled: its waiting deliveries go out now.")
    return redirect(url_for("ui.endpoint", public_id=public_id))


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
