"""Edge checks for every route: a value the database would refuse is a 400 here.

Path segments, query arguments and console forms are checked for NUL, lone surrogates
and length before any view runs; JSON bodies of the admin API for depth and for the same
characters. The receiver's body is checked in ``inbox.domain.intake`` (its JSON depth,
event type and keys). The error handlers keep a backstop (``web/errors.py``): a DataError
that slips past these checks is still a 400, never a 503.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, request
from werkzeug.exceptions import ClientDisconnected

from inbox.domain.errors import BadRequest
from inbox.domain.textcheck import check_json_depth, check_json_strings, check_text

MAX_SEGMENT = 255  # names are at most 100 characters, public ids far fewer
MAX_ARGUMENT = 1000


def _check_path(endpoint: str | None, values: dict[str, Any] | None) -> None:
    if values:
        check_path_values(values)


def check_path_values(values: dict[str, Any]) -> None:
    """The path's values (tenant, source, ids): text of at most ``MAX_SEGMENT``."""
    for name, value in values.items():
        if isinstance(value, str):
            check_text(value, f"The path's {name}", MAX_SEGMENT)


def check_request() -> None:
    """Query arguments, forms and JSON bodies of the admin API and the console. (Not the
    receiver's: it reads no query argument, and its body is the provider's payload, checked
    by intake; so its hot path pays only for the path check.)"""
    if request.query_string:
        for name, value in request.args.items(multi=True):
            check_text(name, "A query argument's name", MAX_ARGUMENT)
            check_text(value, f"The query argument {name[:50]!r}", MAX_ARGUMENT)
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    if request.mimetype == "application/json":
        check_json_depth(request.get_data(cache=True))
        check_json_strings(request.get_json(silent=True))
    elif request.mimetype in ("application/x-www-form-urlencoded", "multipart/form-data"):
        for name, value in request.form.items(multi=True):
            check_text(value, f"The form field {name[:50]!r}", MAX_ARGUMENT)


def read_exactly(environ: dict[str, Any], length: int) -> bytes:
    """``length`` bytes of the body from the server's input (PEP 3333: no more than the
    Content-Length may be read); a sender gone before the end is werkzeug's
    ``ClientDisconnected``, a body shorter than it said a 400."""
    try:
        body: bytes = environ["wsgi.input"].read(length) if length else b""
    except (OSError, ValueError):  # as werkzeug's stream: the sender went away
        raise ClientDisconnected() from None
    check_whole_body(body, length)
    return body


def check_whole_body(body: bytes, content_length: int | None) -> None:
    """A body that ended (EOF) before its Content-Length is a broken request: storing it
    would store a truncated event the sender never meant."""
    if content_length is not None and len(body) < content_length:
        raise BadRequest(
            f"The body ended after {len(body)} of the {content_length} bytes"
            " its Content-Length announced."
        )


_CHECKED = frozenset({"api", "ui"})


def _check_blueprint_request() -> None:
    if _CHECKED.intersection(request.blueprints):
        check_request()


def register(app: Flask) -> None:
    """The path check for every route; the request check for the admin API and the console,
    first: Flask runs the app's ``before_request`` functions before any blueprint's, so the
    check comes before theirs of who is calling (a bad value is a 400 even without a token)."""
    app.url_value_preprocessor(_check_path)
    app.before_request(_check_blueprint_request)
