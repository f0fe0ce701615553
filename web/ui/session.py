"""Signing in and out, and who is signed in: every console request passes through here.

The session is held on the server (``web/ui/security.py``); its row names the token, and
each request looks both up again, so a revoked token or a signed-out session ends at once
in every web process. Failed sign-ins are throttled per client address (``web/throttle.py``).
"""

from __future__ import annotations

import logging
from typing import Any

from flask import g, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from inbox.domain import tokens
from inbox.domain.errors import Forbidden, TooManyRequests, Unauthorized
from inbox.domain.records import TenantId
from inbox.services import admin
from inbox.services.admin import Token
from web import actions, throttle
from web.services import services
from web.ui import security
from web.ui.blueprint import ui

log = logging.getLogger(__name__)

PUBLIC = frozenset({"ui.login"})
# Endpoints read by scripts: they answer 401 rather than redirect to the sign-in page.
JSON_ENDPOINTS = frozenset({"ui.replay_progress"})


def _limits() -> tuple[int, int]:
    settings = services().settings
    return settings.session_idle_minutes * 60, settings.session_hours * 3600


def _signed_in() -> Token | None:
    current = security.console_session()
    if not current.cookie:
        return None
    idle, longest = _limits()
    current.looked_up = True
    found = admin.load_session(actions.runtime(), current.cookie, idle, longest)
    if found is None:
        return None
    stored, token = found
    current.attach(stored, current.cookie)
    return token


@ui.before_request
def _guard() -> Response | None:
    """Sign-in, then the CSRF token of a POST, then the role (a viewer only reads)."""
    if request.endpoint in PUBLIC:
        if request.method == "POST":
            security.check_csrf()
        return None
    token = _signed_in()
    if token is None:
        if request.endpoint in JSON_ENDPOINTS:
            raise Unauthorized("Sign in to the console first.")
        back = request.full_path.rstrip("?") if request.method == "GET" else None
        return redirect(url_for("ui.login", next=back))
    g.ui_token = token
    if request.method == "POST":
        security.check_csrf()
    if request.endpoint != "ui.logout" and not tokens.may(token.role, request.method):
        raise Forbidden(f"A {token.role} token may only read.")
    return None


@ui.after_request
def _headers(resp: Response) -> Response:
    return security.harden(resp)


def current() -> Token:
    token: Token = g.ui_token
    return token


def scope() -> TenantId | None:
    """The tenant the signed-in token is limited to; None for an all-tenants token."""
    return current().tenant_id


def require_operator() -> Token:
    """For pages that only lead to a change (confirmations): a viewer gets 403."""
    token = current()
    if token.role != tokens.Role.OPERATOR:
        raise Forbidden(f"A {token.role} token may only read.")
    return token


@ui.context_processor
def _template_globals() -> dict[str, Any]:
    token: Token | None = g.get("ui_token")
    return {
        "csrf_token": security.csrf_token,
        "csrf_field": security.CSRF_FIELD,
        "me": token,
        "is_operator": token is not None and token.role == tokens.Role.OPERATOR,
    }


@ui.route("/login", methods=["GET", "POST"])
def login() -> Response | tuple[str, int] | str:
    target = security.safe_next(request.values.get("next"))
    if request.method == "GET":
        return render_template("ui/login.html", next=target, error=None)
    try:
        throttle.check("login")
    except TooManyRequests as exc:
        error = f"Too many failed sign-ins from this address; try again in {exc.retry_after} s."
        page = render_template("ui/login.html", next=target, error=error)
        resp = Response(page, status=429, mimetype="text/html")
        resp.headers["Retry-After"] = str(exc.retry_after)
        return resp
    raw = request.form.get("token", "").strip()
    token = admin.authenticate(actions.runtime(), raw)
    if token is None:
        throttle.failed("login")
        error = "That token is unknown or revoked."
        return render_template("ui/login.html", next=target, error=error), 401
    idle, longest = _limits()
    data = {"csrf": security.new_csrf_token()}
    sid, row_id = admin.create_session(actions.runtime(), token.id, data, idle, longest)
    # A new id at every sign-in: an id planted before it (session fixation) is worth nothing.
    security.console_session().begin(sid, row_id, token.id, data)
    log.info("console sign-in by token %s", token.name)
    return redirect(target or url_for("ui.dashboard"))


@ui.post("/logout")
def logout() -> Response:
    """Ends this session on the server: the cookie, wherever a copy of it is, stops working."""
    current = security.console_session()
    if current.row_id is not None:
        admin.delete_session(actions.runtime(), current.row_id)
    current.end()
    return redirect(url_for("ui.login"))
