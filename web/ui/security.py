"""The console's secrets and headers: the session key, CSRF tokens, browser policies."""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from urllib.parse import urlsplit

from flask import Flask, Request, abort, request, session
from flask.sansio.app import App
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from werkzeug.wrappers import Response

log = logging.getLogger(__name__)

CSRF_FIELD = "csrf"
_CSRF_KEY = "csrf"

# Nothing is loaded from anywhere but this server; no inline script or style.
POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


class ConsoleSessions(SecureCookieSessionInterface):
    """Signed-cookie sessions for the console only.

    Every other path (the receiver above all) gets Flask's null session: no cookie is
    read, verified or written there, and the receiver's hot path skips the signing setup.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        if request.path == self.prefix or request.path.startswith(self.prefix + "/"):
            return super().open_session(app, request)
        return self.make_null_session(app)


def configure(app: App, prefix: str = "/ui") -> None:
    """Give the app a session key and cookie settings, unless it has them already.

    The key is ``SECRET_KEY`` from the app's config, else the settings' ``secret_key``,
    else ``INBOX_SECRET_KEY``. Without one a random key is made: sessions then end
    when the process restarts and do not span processes (web workers).
    """
    services = app.extensions.get("inbox")
    settings = services.settings if services is not None else None
    key = (
        app.config.get("SECRET_KEY")
        or (settings.secret_key if settings is not None else "")
        or os.environ.get("INBOX_SECRET_KEY", "")
    )
    if not key:
        log.warning(
            "INBOX_SECRET_KEY is not set: console sessions use a random key, end on restart"
            " and do not span processes"
        )
        key = secrets.token_urlsafe(32)
    app.config["SECRET_KEY"] = key
    if isinstance(app, Flask):
        app.session_interface = ConsoleSessions(prefix)
    if app.config.get("SESSION_COOKIE_NAME") in (None, "session"):
        app.config["SESSION_COOKIE_NAME"] = "inbox_console"
    app.config["SESSION_COOKIE_HTTPONLY"] = True
    if not app.config.get("SESSION_COOKIE_SAMESITE"):
        app.config["SESSION_COOKIE_SAMESITE"] = "Lax"


def csrf_token() -> str:
    """This session's CSRF token (made on first use)."""
    token = session.get(_CSRF_KEY)
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(32)
        session[_CSRF_KEY] = token
    return token


def new_csrf_token() -> None:
    session[_CSRF_KEY] = secrets.token_urlsafe(32)


def check_csrf() -> None:
    """400 unless the form carries this session's CSRF token."""
    expected = session.get(_CSRF_KEY)
    given = request.form.get(CSRF_FIELD, "")
    if not isinstance(expected, str) or not expected or not given:
        abort(400, "The form is missing its CSRF token; reload the page and try again.")
    if not hmac.compare_digest(expected.encode(), given.encode()):
        abort(400, "The form's CSRF token does not match this session; reload the page.")


def safe_next(target: str | None) -> str | None:
    """A path inside the console to return to after signing in; anything else is None."""
    if not target or len(target) > 1000 or not target.isprintable() or not target.isascii():
        return None  # CR/LF would split the Location header; a control character has no use
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or "\\" in target or not target.startswith("/ui"):
        return None
    return target


def harden(resp: Response) -> Response:
    resp.headers["Content-Security-Policy"] = POLICY
    resp.headers["X-Frame-Options"] = "DENY"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "same-origin"
    resp.headers["Cache-Control"] = "no-store"
    return resp
