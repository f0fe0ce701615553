"""``POST /hooks/<tenant>/<source>`` as a plain WSGI callable in front of the Flask app.

A provider's delivery is almost every request this server answers, and Flask's machinery
for one (binding werkzeug's URL map to the environ and matching it, a request context,
the dispatch and its hooks) cost more than the receiver's own work once nothing of it was
remembered between requests. So the accepted path is served here, on public WSGI
(PEP 3333) and werkzeug's ``Response``: the path split by hand, the same edge checks,
the same use case (``Services.intake``) and the same answers as the Flask view
(``web.ingest``), which calls the same functions.

Everything else goes to Flask unchanged: other paths and methods, handshakes, sources
that sign their URL, a body without a Content-Length, a path that is not ASCII. An error
raised here is answered by the Flask app's own error handlers, in a request context of
its own, so a 4xx or 503 is the same body from either side. With tracing on the Flask
app is served alone (its instrumentation makes the server span).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from werkzeug.wrappers import Response

from inbox.domain import intake as core
from inbox.domain.errors import PayloadTooLarge
from inbox.domain.outcomes import IngestOutcome
from web import validate
from web.ingest import answer, deadline, environ_headers, handshake_response, route_of, take

if TYPE_CHECKING:
    from flask import Flask

    from web.services import Services


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
_PREFIX = "/hooks/"
_ERRORS = (IngestOutcome.CONFLICT, IngestOutcome.IN_FLIGHT)


class Receiver:
    """The WSGI app: the receiver's accepted path, else ``flask_app``'s own ``wsgi_app``."""

    def __init__(self, flask_app: Flask) -> None:
        self.flask = flask_app
        self.next: WSGIApp = flask_app.wsgi_app
        self.close_chance = 0.0  # web.keepalive: Connection: close, 1 answer in n

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "POST" or not path.startswith(_PREFIX):
            return self.next(environ, start_response)
        tenant, slash, source = path[len(_PREFIX) :].partition("/")
        if not (tenant and slash and source) or "/" in source or not path.isascii():
            return self.next(environ, start_response)  # Flask's routing answers
        raw = environ.get("CONTENT_LENGTH")
        if not (raw and raw.isdigit()) or "HTTP_TRANSFER_ENCODING" in environ:
            return self.next(environ, start_response)
        try:
            response = self._receive(environ, tenant, source, int(raw))
        except Exception as exc:  # the Flask app's handlers answer, as for its own view
            response = self._error(environ, exc)
        if response is None:
            return self.next(environ, start_response)
        validate.settle_unread(environ, response.headers)  # a 503 before the body, a 404
        if self.close_chance and random.random() < self.close_chance:
            response.headers["Connection"] = "close"
        return response(environ, start_response)

    def _receive(
        self, environ: dict[str, Any], tenant: str, source: str, length: int
    ) -> Response | None:
        """The answer, or None for what only the Flask view does (before the body is read)."""
        validate.check_path_values({"tenant": tenant, "source": source})
        ext: Services = self.flask.extensions["inbox"]
        until = deadline(ext)
        route = route_of(ext, tenant, source, until)
        if core.signs_url(route):
            return None  # the URL as werkzeug builds it: the Flask view's

        def read_body(limit: int) -> bytes:
            if length > limit:
                raise PayloadTooLarge(limit_bytes=limit)
            return validate.read_exactly(environ, length)

        result = take(
            ext, route, read_body, "", lambda: environ_headers(environ), until, tenant, source
        )
        if isinstance(result, core.Handshake):
            with self.flask.app_context():
                return handshake_response(result)
        if result.outcome in _ERRORS:  # a conflict, an event in flight: the error's JSON
            with self.flask.app_context():
                return answer(result)
        return answer(result)

    def _error(self, environ: dict[str, Any], exc: Exception) -> Response:
        with self.flask.request_context(environ):
            try:
                rv = self.flask.handle_user_exception(exc)
            except Exception as unhandled:
                rv = self.flask.handle_exception(unhandled)
            return self.flask.make_response(rv)


def unmount(app: Flask) -> None:
    """Every request through the Flask view again: the baseline of a comparison."""
    if isinstance(app.wsgi_app, Receiver):
        app.wsgi_app = app.wsgi_app.next  # type: ignore[method-assign,assignment]
