"""``/hooks/<tenant>/<source>``: the receiver. The order of checks is the contract."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, jsonify, request

from inbox.domain import intake as core
from inbox.domain.errors import (
    IdempotencyConflict,
    InFlight,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
)
from inbox.domain.outcomes import IngestOutcome
from inbox.domain.records import Source
from inbox.services import intake, overload
from inbox.services.intake import IngestResult
from web import validate
from web.errors import error_response
from web.services import Services, services

log = logging.getLogger(__name__)
hooks = Blueprint("hooks", __name__)

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def _read_body(limit: int) -> bytes:
    """413 before reading when Content-Length says so; otherwise read at most limit+1 bytes,
    so a chunked body over the limit is refused without being buffered whole.

    With a Content-Length (within the limit) the body is read from the server's input
    directly, exactly that many bytes: what werkzeug's stream would do, without building
    it per request. Without one, werkzeug decides what may be read (a chunked body only
    from a server that says the input ends, ``wsgi.input_terminated``)."""
    environ = request.environ
    raw = environ.get("CONTENT_LENGTH")
    if raw and raw.isascii() and raw.isdigit() and "HTTP_TRANSFER_ENCODING" not in environ:
        length: int | None = int(raw)  # the usual case, as werkzeug would read it
    else:
        length = request.content_length
    if length is not None:
        if length > limit:
            raise PayloadTooLarge(limit_bytes=limit)
        return validate.read_exactly(environ, length)
    environ[validate.BODY_READ] = True
    body = request.stream.read(limit + 1)
    if len(body) > limit:
        raise PayloadTooLarge(limit_bytes=limit)
    validate.check_whole_body(body, length)
    return body


@hooks.after_request
def _settle_unread(response: Response) -> Response:
    """An answer given before the body was read keeps the sender's connection usable
    (``validate.settle_unread``): the backlog bound's 503 comes before the body."""
    validate.settle_unread(request.environ, response.headers)
    return response


def _headers() -> dict[str, str]:
    return environ_headers(request.environ)


def environ_headers(environ: dict[str, Any]) -> dict[str, str]:
    """The request's headers by lower-cased name, read from the WSGI environ as PEP 3333
    lays it out (``HTTP_*``, plus ``CONTENT_TYPE`` and ``CONTENT_LENGTH``): the same
    names and values as werkzeug's ``request.headers``, without building its
    title-cased view of every key only to lower-case it again (a test pins the two
    equal)."""
    out = {
        key[5:].replace("_", "-").lower(): value
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    for key, name in (("CONTENT_TYPE", "content-type"), ("CONTENT_LENGTH", "content-length")):
        if value := environ.get(key):
            out[name] = value
    return out


def answer(result: IngestResult) -> Response:
    if result.outcome is IngestOutcome.CONFLICT:
        return error_response(IdempotencyConflict())
    if result.outcome is IngestOutcome.IN_FLIGHT:
        return error_response(InFlight())
    resp = Response(result.body, status=result.status, content_type="application/json")
    if result.status == 204:  # no body, so no media type either
        del resp.headers["Content-Type"]
    if result.outcome is IngestOutcome.DUPLICATE:
        resp.headers["Idempotent-Replayed"] = "true"
    return resp


@hooks.route("/hooks/<tenant>/<source>", methods=_METHODS)
def receive(tenant: str, source: str) -> Response:
    ext = services()
    until = deadline(ext)
    route = route_of(ext, tenant, source, until)
    if request.method == "GET":
        req = core.signed_request("GET", request.url, _headers(), b"")
        handshake = core.handshake_get(route, req, time.time())
        if handshake is not None:
            return handshake_response(handshake)
    if request.method != "POST":
        raise MethodNotAllowed()
    # Few schemes sign the URL; building it costs more than the rest of the request parsing.
    url = request.url if core.signs_url(route) else ""
    done = take(ext, route, _read_body, url, _headers, until, tenant, source)
    if isinstance(done, core.Handshake):
        return handshake_response(done)
    return answer(done)


def deadline(ext: Services) -> float:
    """When every database wait of this request ends (the pool, each statement, the
    group-commit queue): past it, 503, and the sender retries."""
    return time.monotonic() + ext.settings.db_timeout_ms / 1000


def route_of(ext: Services, tenant: str, source: str, until: float) -> Source:
    """The source the path names (cached, ``inbox.services.routes``), else 404."""
    with intake.deadline(until):
        route: Source | None = ext.routes.get(tenant, source)
    if route is None or not route.enabled:
        raise NotFound()
    return route


def take(
    ext: Services,
    route: Source,
    read_body: Callable[[int], bytes],
    url: str,
    headers: Callable[[], dict[str, str]],
    until: float,
    tenant: str,
    source: str,
) -> IngestResult | core.Handshake:
    """A POST to a known source, in the one order the view and ``web/receiver.py`` share
    (docs/reference/ingest.md): the backlog (503), the body within the source's limit
    (``read_body(limit)`` answers 413 past it), the signature and the envelope (401, 400;
    or a provider's handshake), the source's rate (429), then the receive use case."""
    overload.check_backlog(ext.backlog)
    body = read_body(route.options.max_body_bytes or ext.settings.max_body_bytes)
    req = core.signed_request("POST", url, headers(), body)
    prepared = core.prepare(route, req, time.time(), ext.settings.key_ttl_hours)
    if isinstance(prepared, core.Handshake):
        return prepared
    overload.check_rate(ext.limiter, route)
    result = ext.intake.receive(route, prepared, until)
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "ingest %s/%s outcome=%s event=%s",
            tenant,
            source,
            result.outcome,
            result.public_id,
            extra={"tenant": tenant, "source": source, "outcome": result.outcome},
        )
    return result


def handshake_response(answer: core.Handshake) -> Response:
    """A provider's handshake: JSON, plain text (never sniffed as HTML) or an empty body."""
    if isinstance(answer.body, dict):
        resp = jsonify(answer.body)
        resp.status_code = answer.status
        return resp
    resp = Response(answer.body or "", status=answer.status, mimetype="text/plain")
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp
