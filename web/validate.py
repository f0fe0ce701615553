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


BODY_READ = "inbox.body_read"  # the environ key: the receiver began reading the body
# An answer given before the body was read (a 503 of the backlog bound, a 404, a 413) reads
# and drops a body up to this size, so the sender's keep-alive connection carries its next
# request; past it, the answer closes the connection.
DISCARD_MAX_BYTES = 256 * 1024
_DISCARD_CHUNK = 64 * 1024


def read_exactly(environ: dict[str, Any], length: int) -> bytes:
    """``length`` bytes of the body from the server's input (PEP 3333: no more than the
    Content-Length may be read); a sender gone before the end is werkzeug's
    ``ClientDisconnected``, a body shorter than it said a 400."""
    environ[BODY_READ] = True
    try:
        body: bytes = environ["wsgi.input"].read(length) if length else b""
    except (OSError, ValueError):  # as werkzeug's stream: the sender went away
        raise ClientDisconnected() from None
    check_whole_body(body, length)
    return body


def settle_unread(environ: dict[str, Any], headers: Any) -> None:
    """Keep the connection usable after an answer given before the body was read.

    A server that answers without reading the body must close the connection (the unread
    bytes would be taken for the next request), and one that closes it without saying so
    breaks the sender's next request on it: under a backlog bound's 503s every kept-alive
    sender saw a broken pipe. So a body within ``DISCARD_MAX_BYTES`` is read and dropped,
    and the connection goes on; a larger one, or one of unknown length, is answered with
    ``Connection: close``. ``headers``: the answer's, to add that to."""
    if environ.get(BODY_READ) or environ.get("REQUEST_METHOD") in ("GET", "HEAD", "OPTIONS"):
        return
    raw = environ.get("CONTENT_LENGTH") or ""
    chunked = "HTTP_TRANSFER_ENCODING" in environ
    if not chunked and raw.isascii() and raw.isdigit():
        left = int(raw)
        if left == 0:
            return
        if left <= DISCARD_MAX_BYTES:
            environ[BODY_READ] = True
            try:
                stream = environ["wsgi.input"]
                while left > 0:
                    got = stream.read(min(left, _DISCARD_CHUNK))
                    if not got:
                        break
                    left -= len(got)
            except (OSError, ValueError):
                pass  # the sender went away: nothing is left to keep
            if left <= 0:
                return
    elif not chunked:
        return  # no body announced
    headers["Connection"] = "close"


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
