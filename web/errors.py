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


SCHEMA_MESSAGE = "The database schema is missing or behind the code: run `inbox migrate`."
_SCHEMA_ERRORS = (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn)


def unavailable_cause(err: BaseException) -> str:
    """The cause class a 503 names: "schema" (not migrated) or "database" (down, slow)."""
    orig = getattr(err, "orig", err)  # SQLAlchemy wraps the driver's error
    return "schema" if isinstance(orig, _SCHEMA_ERRORS) else "database"


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(InboxError)
    def _inbox_error(err: InboxError) -> Response:
        return error_response(err)

    @app.errorhandler(DBAPIError)
    @app.errorhandler(PoolTimeout)
    @app.errorhandler(psycopg.Error)  # the receiver's claim goes to the driver directly
    def _database_down(err: Exception) -> Response:
        # Never a 2xx without a commit: the sender keeps the event and retries.
        cause = unavailable_cause(err)
        log.warning("%s unavailable: %s", cause, err.__class__.__name__)
        if cause == "schema":
            return error_response(Unavailable(SCHEMA_MESSAGE, cause=cause))
        return error_response(Unavailable(cause=cause))

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
