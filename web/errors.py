"""One error handler: every InboxError becomes its status and a JSON body.

A driver error that reaches the edge (a view that ran a read itself) becomes the inbox's
own as the store says (``inbox.services.failures``; this module names no driver type): a
value the database refuses (sqlstate class 22, a lone surrogate) is the request's fault, a
400, never the 503 of an outage. The edge checks (``web/validate.py``) should catch those
values first; this is the backstop. Any other error is not the store's: Flask's own 500.
"""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from inbox.domain.errors import InboxError, StoreUnavailable, ValueRefused
from inbox.services import failures

log = logging.getLogger(__name__)


def error_response(err: InboxError) -> Response:
    resp = jsonify(err.body())
    resp.status_code = err.http_status
    retry_after = getattr(err, "retry_after", None)
    if retry_after is not None:
        resp.headers["Retry-After"] = str(retry_after)
    return resp


def _logged(err: InboxError) -> InboxError:
    """A refused value or an unavailable store, logged with the class of the error below
    it (the driver's, or the inbox's own when nothing lies below, e.g. ClaimTimeout)."""
    below = type(err.__cause__ or err).__name__
    if isinstance(err, ValueRefused):
        log.info("request refused by the database: %s", below, extra={"error_class": below})
    elif isinstance(err, StoreUnavailable):
        # Never a 2xx without a commit: the sender keeps the event and retries.
        log.warning(
            "%s unavailable: %s",
            err.cause,
            below,
            extra={"error_class": below, "outcome": "unavailable"},
        )
    return err


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(InboxError)
    def _inbox_error(err: InboxError) -> Response:
        return error_response(_logged(err))

    @app.errorhandler(Exception)  # the most general: InboxError and HTTPException go above
    def _store_error(err: Exception) -> Response:
        own = failures.own(err)  # a driver error, or a lone surrogate on its way to it
        if own is None:
            raise err  # not the store's: Flask answers 500 and logs it
        return error_response(_logged(own))

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException) -> Response:
        resp = jsonify(
            {
                "error": {
                    "code": (err.name or "error").lower().replace(" ", "_"),
                    "message": err.description,
                }
            }
        )
        resp.status_code = err.code or 500
        return resp
