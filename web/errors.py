"""One error handler: every InboxError becomes its status and a JSON body.

A value the database refuses (a DataError, sqlstate class 22: out of range, a NUL, bad
text) or one that cannot be encoded for it (a lone surrogate) is the request's fault: a
400, never the 503 of an outage. The edge checks (``web/validate.py``) should catch those
values first; this is the backstop.
"""

from __future__ import annotations

import logging

import psycopg
from flask import Flask, Response, jsonify
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException

from inbox.domain.errors import BadRequest, InboxError, Unavailable

log = logging.getLogger(__name__)


def error_response(err: InboxError) -> Response:
    resp = jsonify(err.body())
    resp.status_code = err.http_status
    retry_after = getattr(err, "retry_after", None)
    if retry_after is not None:
        resp.headers["Retry-After"] = str(retry_after)
    return resp


REFUSED = "The database refused a value in the request (out of range or not valid text)."


def is_data_error(err: BaseException) -> bool:
    """A refusal of the request's values, not an outage."""
    orig = getattr(err, "orig", err)  # SQLAlchemy wraps the driver's error
    if isinstance(orig, psycopg.DataError | UnicodeEncodeError):
        return True
    sqlstate = getattr(orig, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate.startswith("22")


def refused_value(err: BaseException) -> Response:
    log.info(
        "request refused by the database: %s",
        err.__class__.__name__,
        extra={"error_class": type(err).__name__},
    )
    return error_response(BadRequest(REFUSED))


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
        if is_data_error(err):
            return refused_value(err)
        # Never a 2xx without a commit: the sender keeps the event and retries.
        cause = unavailable_cause(err)
        log.warning(
            "%s unavailable: %s",
            cause,
            err.__class__.__name__,
            extra={"error_class": type(err).__name__, "outcome": "unavailable"},
        )
        if cause == "schema":
            return error_response(Unavailable(SCHEMA_MESSAGE, cause=cause))
        return error_response(Unavailable(cause=cause))

    @app.errorhandler(UnicodeEncodeError)  # a lone surrogate on its way to the driver
    def _unencodable(err: UnicodeEncodeError) -> Response:
        return refused_value(err)

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
