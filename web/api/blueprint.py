"""The API's blueprint, on which its route modules register (``web.api``)."""

from __future__ import annotations

from flask import Blueprint, Response

from inbox.domain.errors import Unauthorized
from web.errors import error_response

api = Blueprint("api", __name__, url_prefix="/api/v1")


@api.after_request
def _headers(resp: Response) -> Response:
    """Answers are JSON to be read, never sniffed into something else, and never cached
    (they carry tenants' events; a shared cache must not keep them)."""
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Cache-Control"] = "no-store"
    return resp


@api.errorhandler(Unauthorized)
def _unauthorized(err: Unauthorized) -> Response:
    resp = error_response(err)
    resp.headers["WWW-Authenticate"] = 'Bearer realm="inbox"'
    return resp
