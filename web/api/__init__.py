"""The admin API under ``/api/v1``: bearer tokens, events, deliveries, bulk replays.

Every route but ``/api/v1/openapi.json`` needs ``Authorization: Bearer <token>``
(``inbox tokens create``). A viewer reads; anything but GET needs an operator. A
token limited to one tenant sees only that tenant: anything else is a 404.
"""

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


# The route modules register themselves on ``api``.
from web.api import auth, bulk, deliveries, events, holds, openapi  # noqa: E402, F401
