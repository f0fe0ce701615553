"""``/hooks/<tenant>/<source>``: the receiver. The order of checks is the contract."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from itertools import filterfalse

from flask import Blueprint, Response, jsonify, request
from werkzeug.exceptions import ClientDisconnected

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
from inbox.domain.states import EventState
from inbox.infra import metrics, tracing
from inbox.store.db import errors as db_errors
from inbox.store.db.engine import deadline_at
from inbox.store.reads.events import stored_response
from inbox.store.write.claims import ATTEMPTS
from inbox.store.write.intake import IngestResult, claim, ingest, replay
from web import overload, validate
from web.errors import error_response
from web.responses import BufferedResponse
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
        try:
            body = environ["wsgi.input"].read(length) if length else b""
        except (OSError, ValueError):  # as werkzeug's stream: the sender went away
            raise ClientDisconnected() from None
    else:
        body = request.stream.read(limit + 1)
        if len(body) > limit:
            raise PayloadTooLarge(limit_bytes=limit)
    validate.check_whole_body(body, length)
    return body


_BODY_HEADERS = {"CONTENT_TYPE": "content-type", "CONTENT_LENGTH": "content-length"}
_BODY_NAMES = frozenset(_BODY_HEADERS.values())
# An environ key's header name, for the header keys seen so far: the same few dozen recur
# on every request. Bounded, as a stranger can send any names.
_NAMES: dict[str, str] = {}
# The environ keys seen so far that name no header: the server's own and the process
# environment's, which granian copies into every request's environ (dozens of them, more
# in a container that gets a variable per neighbouring service). They are passed over by
# ``filterfalse`` in C, not looked at one by one in Python.
_NOT_HEADERS: set[str] = set()
_MAX_NAMES = 4096


def _header_name(key: str) -> str:
    if key.startswith("HTTP_"):
        if key in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
            return ""
        return key[5:].replace("_", "-").lower()
    return _BODY_HEADERS.get(key, "")


def _headers() -> dict[str, str]:
    """Lower-cased request headers, read from the WSGI environ as werkzeug's
    ``request.headers`` does, without building its title-cased names first."""
    out: dict[str, str] = {}
    names, skipped = _NAMES, _NOT_HEADERS
    environ = request.environ
    for key in filterfalse(skipped.__contains__, environ):
        name = names.get(key)
        if name is None:
            name = _header_name(key)
            if not name:
                if len(skipped) < _MAX_NAMES:
                    skipped.add(key)
                continue
            if len(names) < _MAX_NAMES:
                names[key] = name
        value = environ[key]
        if value or name not in _BODY_NAMES:  # an empty CONTENT_TYPE: none sent
            out[name] = value
    return out


def _answer(result: IngestResult) -> Response:
    if result.outcome is IngestOutcome.CONFLICT:
        return error_response(IdempotencyConflict())
    if result.outcome is IngestOutcome.IN_FLIGHT:
        return error_response(InFlight())
    resp = BufferedResponse(result.body, status=result.status, content_type="application/json")
    if result.status == 204:  # no body, so no media type either
        del resp.headers["Content-Type"]
    if result.outcome is IngestOutcome.DUPLICATE:
        resp.headers["Idempotent-Replayed"] = "true"
    return resp


@hooks.route("/hooks/<tenant>/<source>", methods=_METHODS)
def receive(tenant: str, source: str) -> Response:
    ext = services()
    # Every database wait of this request ends by then (the pool, each statement, the
    # group-commit queue): past it, 503, and the sender retries.
    until = time.monotonic() + ext.settings.db_timeout_ms / 1000
    with deadline_at(until):
        route: Source | None = ext.routes.get(tenant, source)
    if route is None or not route.enabled:
        raise NotFound()
    if request.method == "GET":
        req = core.signed_request("GET", request.url, _headers(), b"")
        handshake = core.handshake_get(route, req, time.time())
        if handshake is not None:
            return _handshake(handshake)
    if request.method != "POST":
        raise MethodNotAllowed()
    overload.check_backlog(ext.backlog)
    limit = route.options.max_body_bytes or ext.settings.max_body_bytes
    body = _read_body(limit)
    # Few schemes sign the URL; building it costs more than the rest of the request parsing.
    url = request.url if core.signs_url(route) else ""
    req = core.signed_request("POST", url, _headers(), body)
    prepared = core.prepare(route, req, time.time(), ext.settings.key_ttl_hours)
    if isinstance(prepared, core.Handshake):
        return _handshake(prepared)
    overload.check_rate(ext.limiter, route)
    # The claim's span context is what the event stores (the claim reads it): its trace
    # continues in the worker and the courier. None, at no cost, while tracing is off.
    with tracing.span("inbox.claim") as current, deadline_at(until):
        result = claim(ext.claims, route, prepared)  # counted by the claims, per statement
        if result is None:  # the key is taken: a duplicate or a conflict
            result = _taken(ext, route, prepared, until)
            metrics.record_ingest(route.tenant, route.name, result.outcome)
        if current is not None:
            current.set_attributes(_claim_attributes(route, result))
    # Committed. Only now may the sender hear 2xx; the doorbell is best effort.
    if result.outcome is IngestOutcome.ACCEPTED and prepared.filter_reason is not None:
        # Stored as filtered: answered as accepted, never run, so no doorbell and no wait.
        metrics.record_filtered(route.tenant, route.name)
    elif result.outcome is IngestOutcome.ACCEPTED:
        _ring(ext)
        if prepared.wait_seconds:
            result = _wait_for_decision(ext, result, prepared.wait_seconds)
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "ingest %s/%s outcome=%s event=%s",
            tenant,
            source,
            result.outcome,
            result.public_id,
            extra={"tenant": tenant, "source": source, "outcome": result.outcome},
        )
    return _answer(result)


def _claim_attributes(route: Source, result: IngestResult) -> dict[str, str | int | bool]:
    return {
        "inbox.tenant": route.tenant,
        "inbox.source": route.name,
        "inbox.event_id": result.public_id,
        "inbox.outcome": result.outcome,  # accepted | duplicate | conflict | in_flight
        "inbox.duplicate": result.outcome is not IngestOutcome.ACCEPTED,
        "db.system": "postgresql",
        "db.operation": "INSERT",
    }


def _taken(ext: Services, route: Source, prepared: core.Prepared, until: float) -> IngestResult:
    """A taken key the claim did not answer: a synchronous source's copy in one statement,
    else (another body, a pruned key) the duplicate path's transaction. Each takes one
    row lock at most (the original's), so neither can deadlock; a deadlock or
    serialization failure is retried all the same, a few times within the deadline, as
    the claims are."""
    replayed = replay(ext.engine, route, prepared, until)
    if replayed is not None:
        return replayed
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with ext.engine.begin() as conn:
                return ingest(conn, route, prepared)
        except db_errors.DRIVER_ERRORS as exc:
            retry = db_errors.retryable(exc)
            if not retry or attempt == ATTEMPTS or time.monotonic() >= until:
                raise db_errors.wrap(exc) from exc
    raise AssertionError("unreachable")  # pragma: no cover


def _wait_for_decision(ext: Services, result: IngestResult, seconds: float) -> IngestResult:
    """``Prefer: wait=N``: answer with the decision if it is made within N seconds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
        with ext.engine.connect() as conn:
            stored = stored_response(conn, result.event_id)
        if stored.state == EventState.COMPLETED:
            return replace(result, status=stored.status, body=stored.body)
        if stored.state == EventState.QUARANTINED:
            break
    return result


def _ring(ext: Services) -> None:
    try:
        ext.doorbell()
    except Exception as exc:  # the sweeper re-rings; never fail an accepted event
        log.warning(
            "doorbell failed: %s",
            exc.__class__.__name__,
            extra={"error_class": type(exc).__name__},
        )


def _handshake(answer: core.Handshake) -> Response:
    """A provider's handshake: JSON, plain text (never sniffed as HTML) or an empty body."""
    if isinstance(answer.body, dict):
        resp = jsonify(answer.body)
        resp.status_code = answer.status
        return resp
    resp = BufferedResponse(answer.body or "", status=answer.status, mimetype="text/plain")
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp
