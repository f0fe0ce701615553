"""Signing in and out, and who is signed in: every console request passes through here.

The session cookie (signed with the app's key) holds the token's row id, its creation
time and when the operator signed in; never the token. Each request looks the token up
again, so a revoked token ends its sessions at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from flask import g, redirect, render_template, request, session, url_for
from sqlalchemy import Connection
from werkzeug.wrappers import Response

from inbox.domain import tokens
from inbox.domain.errors import Forbidden, Unauthorized
from inbox.store import tokens as store
from inbox.store.tokens import Token
from web.services import services
from web.ui import security, ui

log = logging.getLogger(__name__)

SESSION_SECONDS = 12 * 3600
PUBLIC = frozenset({"ui.login"})
# Endpoints read by scripts: they answer 401 rather than redirect to the sign-in page.
JSON_ENDPOINTS = frozenset({"ui.replay_progress"})
_IDENTITY = ("tid", "tct", "at")


def live_token(conn: Connection, token_id: int, created_at: str) -> Token | None:
    """The unrevoked token with this id (and creation time, so a reused id never matches)."""
    for token in store.list_tokens(conn):
        if token.id == token_id:
            live = token.revoked_at is None and token.created_at.isoformat() == created_at
            return token if live else None
    return None


def _signed_in() -> Token | None:
    tid, created, at = (session.get(k) for k in _IDENTITY)
    if not isinstance(tid, int) or not isinstance(created, str) or not isinstance(at, int):
        return None
    if not 0 <= time.time() - at <= SESSION_SECONDS:
        return None
    with services().engine.connect() as conn:
        return live_token(conn, tid, created)


@ui.before_request
def _guard() -> Response | None:
    """Sign-in, then the CSRF token of a POST, then the role (a viewer only reads)."""
    if request.endpoint in PUBLIC:
        if request.method == "POST":
            security.check_csrf()
        return None
    token = _signed_in()
    if token is None:
        for key in _IDENTITY:
            session.pop(key, None)
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


def scope() -> int | None:
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
    raw = request.form.get("token", "").strip()
    with services().engine.begin() as conn:
        token = store.authenticate(conn, raw)
    if token is None:
        error = "That token is unknown or revoked."
        return render_template("ui/login.html", next=target, error=error), 401
    session.clear()
    session.update(tid=token.id, tct=token.created_at.isoformat(), at=int(time.time()))
    security.new_csrf_token()
    log.info("console sign-in by token %s", token.name)
    return redirect(target or url_for("ui.dashboard"))


@ui.post("/logout")
def logout() -> Response:
    session.clear()
    return redirect(url_for("ui.login"))
