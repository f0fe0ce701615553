"""Errors inside the console are pages (JSON for the endpoints scripts read)."""

from __future__ import annotations

import logging

from flask import jsonify, render_template, request
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from inbox.domain.errors import InboxError, Unavailable, ValueRefused
from inbox.services import failures
from web.ui.blueprint import ui
from web.ui.session import JSON_ENDPOINTS

log = logging.getLogger(__name__)


def _answer(status: int, code: str, title: str, message: str) -> Response:
    if request.endpoint in JSON_ENDPOINTS:
        resp: Response = jsonify({"error": {"code": code, "message": message}})
        resp.status_code = status
        return resp
    html = render_template("ui/error.html", status=status, title=title, message=message)
    return Response(html, status=status, mimetype="text/html")


@ui.errorhandler(InboxError)
def _inbox_error(err: InboxError) -> Response:
    title = err.code.replace("_", " ").capitalize()
    resp = _answer(err.http_status, err.code, title, err.message)
    retry_after = getattr(err, "retry_after", None)
    if retry_after is not None:
        resp.headers["Retry-After"] = str(retry_after)
    return resp


@ui.errorhandler(HTTPException)
def _http_error(err: HTTPException) -> Response:
    name = err.name or "Error"
    return _answer(err.code or 500, name.lower().replace(" ", "_"), name, err.description or "")


@ui.errorhandler(Exception)  # the most general: the two handlers above come first
def _database_down(err: Exception) -> Response:
    """A driver error (or a lone surrogate on its way to it) as the store wraps it; any
    other error is not the store's, and Flask's 500."""
    own = failures.own(err)
    if own is None:
        raise err
    below = type(err).__name__
    if isinstance(own, ValueRefused):  # the request's value, not an outage
        log.info("request refused by the database: %s", below)
        return _inbox_error(own)
    log.warning("database unavailable: %s", below)
    return _inbox_error(Unavailable())
