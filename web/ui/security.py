"""The console's sessions, CSRF tokens and browser policies.

Sessions are held on the server (``inbox/store/write/sessions.py``): the cookie carries a random
id and nothing else, so no signing key is needed and every web process sees the same
sessions without configuration. Signing out deletes the session's row: a copy of the
cookie taken before is worthless everywhere at once. A session ends after
``INBOX_SESSION_IDLE_MINUTES`` without a request (30) and ``INBOX_SESSION_HOURS`` after
sign-in (12). The cookie is HttpOnly, SameSite=Lax, and Secure (with the ``__Host-``
prefix) when ``INBOX_COOKIE_SECURE`` says so or ``INBOX_PUBLIC_URL`` is https.

Before sign-in there is no session (a visitor stores nothing): the sign-in form's CSRF
token is a double-submit cookie of its own, SameSite=Strict.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, Request, abort, g, request, session
from flask.sansio.app import App
from flask.sessions import SessionInterface, SessionMixin
from werkzeug.datastructures import CallbackDict
from werkzeug.wrappers import Response

from inbox.domain.errors import StoreUnavailable, ValueRefused
from inbox.services import admin
from inbox.services.admin import StoredSession
from web import actions

log = logging.getLogger(__name__)

CSRF_FIELD = "csrf"
_CSRF_KEY = "csrf"

# Nothing is loaded from anywhere but this server; no inline script or style.
POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


class ConsoleSession(CallbackDict[str, Any], SessionMixin):
    """One request's view of a server-held session: empty until ``attach`` or ``begin``."""

    def __init__(self, cookie: str | None) -> None:
        def changed(_: CallbackDict[str, Any]) -> None:
            self.modified = True

        super().__init__(None, changed)
        self.cookie = cookie  # the id the browser sent (not yet looked up)
        self.sid: str | None = None
        self.row_id: int | None = None
        self.token_id: int | None = None
        self.stale = False
        self.looked_up = False  # the cookie was checked (and found live, or not)
        self.issued = False  # a new id to send
        self.ended = False  # signed out: delete the cookie
        self.modified = False

    @property
    def signed_in(self) -> bool:
        return self.row_id is not None

    def attach(self, stored: StoredSession, sid: str) -> None:
        dict.update(self, stored.data)  # not a change
        self.sid, self.row_id, self.token_id, self.stale = (
            sid,
            stored.id,
            stored.token_id,
            stored.stale,
        )

    def begin(self, sid: str, row_id: int, token_id: int, data: dict[str, Any]) -> None:
        dict.clear(self)
        dict.update(self, data)
        self.sid, self.row_id, self.token_id = sid, row_id, token_id
        self.issued, self.ended, self.modified = True, False, False

    def end(self) -> None:
        dict.clear(self)
        self.sid = self.row_id = self.token_id = None
        self.ended, self.issued, self.modified = True, False, False


class ConsoleSessions(SessionInterface):
    """Server-held sessions under the console's prefix; Flask's null session elsewhere, so
    the receiver's hot path reads no cookie and touches no table."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def _console(self, request: Request) -> bool:
        return request.path == self.prefix or request.path.startswith(self.prefix + "/")

    def open_session(self, app: Flask, request: Request) -> SessionMixin | None:
        if not self._console(request):
            return self.make_null_session(app)
        # Looked up by the console's guard, inside the request, where a database that is
        # down is a 503 page (here it would be a bare 500).
        return ConsoleSession(request.cookies.get(self.get_cookie_name(app)) or None)

    def save_session(self, app: Flask, session: SessionMixin, response: Response) -> None:
        if not isinstance(session, ConsoleSession):
            return
        name, path = self.get_cookie_name(app), "/"
        secure, samesite = app.config["SESSION_COOKIE_SECURE"], "Lax"
        if session.ended or (session.looked_up and session.cookie and not session.signed_in):
            response.delete_cookie(name, path=path, secure=secure, httponly=True, samesite=samesite)
            return
        if session.row_id is None:
            return
        if session.issued and session.sid:
            response.set_cookie(
                name, session.sid, path=path, secure=secure, httponly=True, samesite=samesite
            )
        if session.modified or session.stale:
            try:
                data = dict(session) if session.modified else None
                admin.save_session(actions.runtime(), session.row_id, data, touch=session.stale)
            except (StoreUnavailable, ValueRefused) as exc:  # the page is rendered: a lost
                log.warning("console session not saved: %s", exc.__class__.__name__)  # flash


def configure(app: App, prefix: str = "/ui") -> None:
    """Server-held sessions and cookie settings for the console."""
    services = app.extensions.get("inbox")
    settings = services.settings if services is not None else None
    secure = settings.secure_cookie if settings is not None else False
    if settings is not None and settings.secret_key and not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = settings.secret_key  # unused by the console now
    if isinstance(app, Flask):
        app.session_interface = ConsoleSessions(prefix)
    app.config["SESSION_COOKIE_SECURE"] = secure
    if app.config.get("SESSION_COOKIE_NAME") in (None, "session"):
        # __Host-: only over https, for this host only, for every path; no subdomain can set it.
        app.config["SESSION_COOKIE_NAME"] = "__Host-inbox_console" if secure else "inbox_console"
    app.config["LOGIN_CSRF_COOKIE"] = "__Host-inbox_login" if secure else "inbox_login"


def console_session() -> ConsoleSession:
    current = session._get_current_object()  # type: ignore[attr-defined]
    assert isinstance(current, ConsoleSession)
    return current


def csrf_token() -> str:
    """The CSRF token for this page's forms: the session's, or before sign-in the sign-in
    form's own (a cookie the form must repeat)."""
    current = console_session()
    if current.signed_in:
        token = current.get(_CSRF_KEY)
        if not isinstance(token, str) or not token:
            token = secrets.token_urlsafe(32)
            current[_CSRF_KEY] = token
        return token
    token = g.get("login_csrf") or _login_cookie()
    if not token:
        token = secrets.token_urlsafe(32)
        g.login_csrf_new = True
    g.login_csrf = token
    return token


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def _login_cookie() -> str:
    from flask import current_app

    return request.cookies.get(current_app.config["LOGIN_CSRF_COOKIE"], "")


def check_csrf() -> None:
    """400 unless the form carries this session's (or the sign-in form's) CSRF token."""
    current = console_session()
    expected = current.get(_CSRF_KEY) if current.signed_in else _login_cookie()
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
    if g.get("login_csrf_new"):
        from flask import current_app

        resp.set_cookie(
            current_app.config["LOGIN_CSRF_COOKIE"],
            g.login_csrf,
            path="/",  # __Host- asks for /
            secure=current_app.config["SESSION_COOKIE_SECURE"],
            httponly=True,
            samesite="Strict",
        )
    return resp
