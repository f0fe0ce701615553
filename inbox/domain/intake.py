"""The ingest contract, minus HTTP and SQL: from a verified request to the row to store.

The web view finds the route, enforces the method and size, and calls ``prepare``;
``prepare`` applies the rest of the order of operations (415, 401, 400) and
builds everything the one INSERT needs. Nothing here touches the database.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlencode

from inbox.domain import evidence, filters, jsonpath, lanekeys, ledger, ordering
from inbox.domain.errors import BadRequest, Unauthorized, UnsupportedMediaType
from inbox.domain.idempotency import (
    body_key_digest,
    body_sha256,
    business_key_digest,
    key_digest,
    subject_digest,
    validate_key,
)
from inbox.domain.records import Source
from inbox.domain.retention import key_window_hours
from inbox.domain.signatures import (
    Scheme,
    SchemeConfig,
    SignatureError,
    SignedRequest,
    scheme_for,
)
from inbox.domain.textcheck import check_json_depth, check_text

log = logging.getLogger(__name__)

FORM = "application/x-www-form-urlencoded"
MAX_WAIT_SECONDS = 30
# Never stored: credentials, signatures, and headers that carry keys or provider ids.
_SECRET_HEADER = re.compile(r"signature|hmac|token|secret|auth|cookie|key|challenge", re.I)
_ID_HEADERS = frozenset(
    {
        "webhook-id",
        "svix-id",
        "x-github-delivery",
        "x-shopify-webhook-id",
        "x-shopify-event-id",
    }
)


@dataclass(frozen=True)
class Prepared:
    """One event, ready for the claiming INSERT."""

    public_id: str
    key_digest: bytes | None
    key_expires_hours: int
    event_type: str | None
    business_key_digest: bytes | None
    content_type: str
    body: bytes
    body_sha256: bytes  # of the raw bytes received: the evidence
    headers: dict[str, str]
    response_status: int
    response_body: bytes
    wait_seconds: float | None
    # What a copy must match to be answered as this delivery was (else 422): the body's
    # digest without the fields the provider restamps between retries. None: body_sha256.
    match_sha256: bytes | None = None
    # How the request was authenticated (inbox.domain.evidence.verdict).
    verification: dict[str, Any] | None = None
    # Why the source's filter keeps this event from running (stored as ``filtered``).
    filter_reason: str | None = None
    # The digest of the subject the source's ``subject_path`` names (inbox.domain.erasure):
    # its payload is sealed under that subject's key; None: under the tenant's.
    subject_digest: bytes | None = None
    # An ordered source's lane when its lane key is configured (inbox.domain.lanekeys);
    # otherwise the lane is the business key (inbox.store.db.claims.row).
    lane_digest: bytes | None = None
    # Its place in an ordered source's lane before its receipt (inbox.domain.ordering
    # .lane_position): 0 unless the source names the provider's time or version.
    lane_position: Decimal = Decimal(0)
    # Set once sealed (inbox.store.db.sealing): the data key's id, ``body`` the sealed
    # bytes and ``headers_sealed`` the sealed headers (``headers`` then empty).
    key_id: int | None = None
    headers_sealed: bytes | None = None


@dataclass(frozen=True)
class Handshake:
    """A provider's verification request, answered without storing anything: a JSON
    object, text (text/plain) or no body at all (None)."""

    status: int
    body: dict[str, Any] | str | None


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def scheme_of(source: Source) -> Scheme:
    """The source's scheme; a ``recipe`` source runs its own recipe option."""
    return scheme_for(source.scheme, source.options.recipe)


def signs_url(source: Source) -> bool:
    """Whether the source's signature covers the URL (the web layer then passes it)."""
    return scheme_of(source).signs_url


def scheme_config(source: Source) -> SchemeConfig:
    opts = source.options
    return SchemeConfig(
        secrets=source.secrets,
        tolerance=opts.tolerance,
        header=opts.header,
        public_url=opts.public_url,
    )


def signed_request(method: str, url: str, headers: dict[str, str], body: bytes) -> SignedRequest:
    form: dict[str, list[str]] = {}
    if media_type(headers.get("content-type")) == FORM:
        form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return SignedRequest(method=method, url=url, headers=headers, body=body, form=form)


def handshake_get(source: Source, req: SignedRequest, now: float) -> Handshake | None:
    """A GET is only a provider's verification handshake (Okta), or nothing."""
    scheme = scheme_of(source)
    try:
        answer = scheme.get_challenge(req, scheme_config(source))
    except SignatureError as exc:
        log.info(
            "verification GET refused: %s",
            exc.__class__.__name__,
            extra={
                "tenant": source.tenant,
                "source": source.name,
                "error_class": type(exc).__name__,
            },
        )
        raise Unauthorized() from None
    return Handshake(*answer) if answer else None


def parse_wait(prefer: str | None) -> float | None:
    """``Prefer: wait=N`` (RFC 7240), capped at 30 seconds."""
    if not prefer:
        return None
    for part in prefer.split(","):
        name, _, value = part.strip().partition("=")
        if name.strip().lower() == "wait":
            try:
                seconds = float(value.strip().strip('"'))
            except ValueError:
                return None
            return min(max(seconds, 0.0), MAX_WAIT_SECONDS) or None
    return None


def _parse_body(
    content_type: str, body: bytes, form: Mapping[str, list[str]], payload_field: str | None
) -> Any:
    if content_type == FORM:
        if payload_field is None:
            return form
        # The event is JSON in one form field (GitHub's payload=).
        values = form.get(payload_field, [])
        if len(values) != 1:
            raise BadRequest(f"The form body needs exactly one {payload_field} field.")
        body = values[0].encode("utf-8")
    check_json_depth(body)
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("The body is not valid JSON.") from None


@functools.lru_cache(maxsize=1024)
def _storable(name: str) -> bool:
    """A header name that may be stored (the same few names recur on every request)."""
    return name not in _ID_HEADERS and not _SECRET_HEADER.search(name)


def _stored_headers(headers: dict[str, str], token_header: str | None) -> dict[str, str]:
    kept = {
        name: value for name, value in headers.items() if name != token_header and _storable(name)
    }
    for name, value in kept.items():  # kept as jsonb, which holds no NUL
        if "\x00" in value:
            check_text(value, f"The {name} header")
    return kept


def _redacted_body(
    body: bytes,
    parsed: Any,
    paths: tuple[str, ...],
    content_type: str,
    payload_field: str | None = None,
) -> bytes:
    """The body to store: with each of ``paths`` replaced by a marker, JSON or form alike
    (a form field's path is its name). The signature was checked on the raw bytes first.
    A form that carries its event as JSON in one field (GitHub's ``payload=``) is redacted
    inside that JSON and stored as the same one-field form."""
    if not paths:
        return body
    if content_type == FORM and payload_field is not None:
        hit = False
        for path in paths:
            hit = jsonpath.redact(parsed, path) or hit
        if not hit:
            return body
        return urlencode({payload_field: json.dumps(parsed, separators=(",", ":"))}).encode()
    if content_type == FORM:
        parsed = {name: list(values) for name, values in parsed.items()}  # req.form stays
    hit = False
    for path in paths:
        hit = jsonpath.redact(parsed, path) or hit
    if not hit:
        return body
    if content_type == FORM:
        return urlencode(parsed, doseq=True).encode()
    return json.dumps(parsed, separators=(",", ":")).encode()


def _business_key(source: Source, parsed: Any) -> bytes | None:
    """The digest of the business key values, or None when the body has none of them."""
    values = [jsonpath.get_text(parsed, p) for p in source.options.business_key_paths]
    if not any(v is not None for v in values):
        return None
    for value in values:
        if value is not None:
            check_text(value, "A business key value")
    return business_key_digest(source.tenant_id, [v or "" for v in values])


def _subject(source: Source, parsed: Any) -> bytes | None:
    """The digest of the subject the source's ``subject_path`` names (read before
    redaction), or None: the payload is then sealed under the tenant's key."""
    path = source.options.subject_path
    value = jsonpath.get_text(parsed, path) if path and parsed is not None else None
    if value is None or value == "":
        return None
    check_text(value, "The subject")
    return subject_digest(source.tenant_id, value)


def _identity(source: Source, scheme: Scheme, parsed: Any, match: bytes) -> bytes | None:
    """The identity of a delivery that carries no Idempotency-Key and no provider id: the
    digest of its body (without restamped fields), or of the source's identity_paths
    values; None where the source (or its scheme, by default) keys no such delivery."""
    opts = source.options
    wanted = opts.body_identity if opts.body_identity is not None else scheme.body_identity
    if not (wanted or opts.identity_paths):
        return None
    if opts.identity_paths:
        values = [jsonpath.get(parsed, path) for path in opts.identity_paths]
        if any(v is not None for v in values):
            text = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            return body_sha256(b"fields\n" + text.encode("utf-8", "surrogatepass"))
    return match


def _match_digest(scheme: Scheme, body: bytes, raw: bytes, ctype: str, parsed: Any) -> bytes:
    """What a copy must match: the raw body's SHA-256, unless the provider restamps."""
    if not scheme.restamped:
        return raw
    if ctype == FORM:  # the JSON in a form field is not the body: read the body again
        return scheme.match_digest(body)
    return scheme.match_digest(body, parsed)  # parsed already: not again per request


def _dedup_digest(source: Source, key: str | None, identity: bytes | None) -> bytes | None:
    """The stored dedup key: of the Idempotency-Key or provider id, else of the identity."""
    if key:
        return key_digest(source.tenant_id, source.id, key)
    if identity is not None:
        return body_key_digest(source.tenant_id, source.id, identity)
    return None


def _answer(public_id: str, status: int, word: str) -> bytes:
    """The stored answer's body. The id is hex: nothing to escape. A 204 carries no body
    (the provider asks for none)."""
    return b"" if status == 204 else f'{{"id":"{public_id}","status":"{word}"}}'.encode()


def prepare(
    source: Source,
    req: SignedRequest,
    now: float,
    default_key_ttl_hours: int,
) -> Prepared | Handshake:
    """Apply 415, 401 and 400 in that order, then build the event. Raises InboxError."""
    scheme = scheme_of(source)
    opts = source.options
    ctype = media_type(req.headers.get("content-type"))
    if not scheme.accepts(ctype):
        raise UnsupportedMediaType(
            f"This source accepts {', '.join(sorted(scheme.content_types))}."
        )
    cfg = scheme_config(source)
    try:
        verified = scheme.verify(req, cfg, now)
    except SignatureError as exc:
        # The reason goes to the log (never the signature); the client sees one uniform body.
        log.info(
            "signature refused for %s: %s",
            source.path,
            exc,
            extra={
                "tenant": source.tenant,
                "source": source.name,
                "error_class": type(exc).__name__,
            },
        )
        raise Unauthorized() from None

    raw_key = req.headers.get("idempotency-key")
    key = validate_key(raw_key) if raw_key is not None else None
    parsed = _parse_body(ctype, req.body, req.form, scheme.form_payload_field)
    challenge = scheme.challenge(req, parsed, verified)
    if challenge is not None:
        return Handshake(*challenge)

    provider_id = verified.event_id
    id_path = opts.event_id_path or scheme.event_id_path
    if provider_id is None and id_path:
        provider_id = jsonpath.get_text(parsed, id_path)
    dedup = key or provider_id
    raw_sha256 = body_sha256(req.body)
    match = _match_digest(scheme, req.body, raw_sha256, ctype, parsed)
    identity = None if dedup else _identity(source, scheme, parsed, match)
    if identity is not None and opts.identity_paths:
        match = identity  # the named fields are the delivery: the rest may change on retry
    if dedup is None and identity is None and opts.require_idempotency_key:
        raise BadRequest("This source requires an Idempotency-Key header.")

    if opts.event_type_path:
        event_type = jsonpath.get_text(parsed, opts.event_type_path)
    else:
        event_type = verified.event_type
        if event_type is None and scheme.event_type_path:
            event_type = jsonpath.get_text(parsed, scheme.event_type_path)
    # Values the database (text, jsonb, UTF-8) would refuse are the sender's 400, here.
    if event_type is not None:
        check_text(event_type, "The event type")
    if provider_id is not None:
        check_text(provider_id, "The event id")

    bk = _business_key(source, parsed)
    subject = _subject(source, parsed)

    position = None
    if bk is not None and (opts.occurred_at_path or opts.version_path):
        # Checked here so a bad value is a 400 with nothing stored; the worker reads it again.
        position = ordering.position(parsed, opts.occurred_at_path, opts.version_path)

    # The day of receipt in the id: a lookup by public id prunes to its partitions.
    day = dt.datetime.fromtimestamp(now, dt.UTC).date()
    public_id = ledger.public_id("evt_", day, secrets.token_hex(8))
    digest = _dedup_digest(source, dedup, identity)
    signed = evidence.signature_headers(scheme, req.headers, source.secrets, opts.header)
    headers = _stored_headers(dict(req.headers), opts.header)  # what a filter may read
    reason = filters.source_reason(opts.filter, parsed, headers) if opts.filter else None
    lane = (
        lanekeys.digest(source.tenant_id, opts.lane_key, opts.lane_key_paths, parsed, headers)
        if opts.serialize_by_business_key
        and lanekeys.configured(opts.lane_key, opts.lane_key_paths)
        else None
    )
    # Filtered or not, the provider hears the scheme's answer: it must stop retrying.
    status = scheme.accept_status
    response = _answer(public_id, status, "accepted" if reason is None else "filtered")
    return Prepared(
        public_id=public_id,
        key_digest=digest,
        key_expires_hours=key_window_hours(
            source.scheme, opts.key_ttl_hours, default_key_ttl_hours
        ),
        event_type=event_type,
        business_key_digest=bk,
        content_type=ctype,
        body=_redacted_body(req.body, parsed, opts.redact_paths, ctype, scheme.form_payload_field),
        body_sha256=raw_sha256,
        headers=headers,
        response_status=status,
        response_body=response,
        # A filtered event has no decision to wait for.
        wait_seconds=parse_wait(req.headers.get("prefer")) if reason is None else None,
        match_sha256=None if match == raw_sha256 else match,
        subject_digest=subject,
        verification=evidence.verdict(
            scheme,
            cfg,
            source.secret_ids,
            verified.secret,
            now,
            digest,
            raw_sha256,
            signed,
            req.url,
            opts.recipe,
        ),
        filter_reason=reason,
        lane_digest=lane,
        # Without the provider's time, an event of a source ordered by it stands at its
        # receipt time; without a version, first (0).
        lane_position=ordering.lane_position(position)
        if position is not None
        else Decimal(str(now))
        if opts.occurred_at_path
        else Decimal(0),
    )


def imported(
    source: Source,
    provider_id: str,
    body: bytes,
    event_type: str | None,
    now: float,
    default_key_ttl_hours: int,
    fetcher: str,
) -> Prepared:
    """An event fetched from the provider's own API (``inbox.services.gapfill``): no
    signature to check, keyed by its provider id, so a late original delivery of it is a
    copy. Its ``verification`` says it was reconciled, not verified. The copy must match
    the scheme's match digest, which for a provider that restamps fields is taken over the
    JSON (whitespace aside), as a delivery's is."""
    scheme = scheme_of(source)
    opts = source.options
    check_text(provider_id, "The event id")
    if event_type is not None:
        check_text(event_type, "The event type")
    check_json_depth(body)
    parsed = json.loads(body)
    raw_sha256 = body_sha256(body)
    match = scheme.match_digest(body, parsed) if scheme.restamped else raw_sha256
    digest = key_digest(source.tenant_id, source.id, provider_id)
    day = dt.datetime.fromtimestamp(now, dt.UTC).date()
    public_id = ledger.public_id("evt_", day, secrets.token_hex(8))
    status = scheme.accept_status
    response = _answer(public_id, status, "accepted")
    subject = _subject(source, parsed)
    return Prepared(
        public_id=public_id,
        key_digest=digest,
        key_expires_hours=key_window_hours(
            source.scheme, opts.key_ttl_hours, default_key_ttl_hours
        ),
        event_type=event_type,
        business_key_digest=_business_key(source, parsed),
        content_type="application/json",
        body=_redacted_body(body, parsed, opts.redact_paths, "application/json"),
        body_sha256=raw_sha256,
        headers={"content-type": "application/json"},
        response_status=status,
        response_body=response,
        wait_seconds=None,
        match_sha256=None if match == raw_sha256 else match,
        subject_digest=subject,
        verification={
            "scheme": scheme.name,
            "verified": False,
            "reconciled": True,
            "fetcher": fetcher,
            "checked_at": now,
            "key_digest": digest.hex(),
            "raw_sha256": raw_sha256.hex(),
        },
    )
