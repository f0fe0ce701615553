"""One error handler: every InboxError becomes its status and a JSON body."""

from __future__ import annotations

import logging

import psycopg
from flask import Flask, Response, jsonify
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException

from inbox.domain.errors import InboxError, Unavailable

log = logging.getLogger(__name__)


def error_response(err: InboxError) -> Response:
    resp = jsonify(err.body())
    resp.status_code = err.http_status
    retry_after = getattr(err, "retry_after", None)
    if retry_after is not None:
        resp.headers["Retry-After"] = str(retry_after)
    return resp


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(InboxError)
    def _inbox_error(err: InboxError) -> Response:
        return error_response(err)

    @app.errorhandler(DBAPIError)
    @app.errorhandler(PoolTimeout)
    @app.errorhandler(psycopg.Error)  # the receiver's claim goes to the driver directly
    def _database_down(err: Exception) -> Response:
        # Never a 2xx without a commit: the sender keeps the event and retries.
        log.warning("database unavailable: %s", err.__class__.__name__)
        return error_response(Unavailable())

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
