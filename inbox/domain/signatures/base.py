"""The shared vocabulary of signature schemes: request, config, result, error, base class."""

from __future__ import annotations

import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from inbox.domain import jsonpath
from inbox.domain.errors import InboxError

# The answer codes a scheme may give an accepted delivery: 204 is sent without a body.
ACCEPT_STATUSES = (200, 202, 204)
GENERIC_ANSWER = (
    "generic: 202 Accepted (RFC 9110, 15.3.3), the inbox's default; a recipe's"
    " accept_status gives a sender that needs it 200 or 204"
)


class SignatureError(InboxError):
    """Raised for ANY authentication failure: missing header, malformed header, bad signature,
    stale/future timestamp, undecodable secret. The message is for logs only and must never contain
    the secret, the received signature or the expected signature."""


@dataclass(frozen=True)
class SignedRequest:
    """One received request, as the signature schemes see it."""

    method: str
    url: str
    headers: Mapping[str, str]  # keys are lower-case header names
    body: bytes
    form: Mapping[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class SchemeConfig:
    """A source's verification settings."""

    secrets: tuple[str, ...]
    tolerance: int = 300
    header: str | None = None
    public_url: str | None = None


@dataclass(frozen=True)
class Verified:
    """What a successful verification learned from the headers."""

    event_id: str | None = None
    event_type: str | None = None
    # The configured secret that matched (handshakes that answer with an HMAC need it).
    secret: str | None = field(default=None, repr=False, compare=False)


class Answer(NamedTuple):
    """A handshake reply: a JSON object, text (sent as text/plain) or None (no body)."""

    status: int
    body: dict[str, object] | str | None


_UNPARSED: Any = object()  # match_digest: the caller has not parsed the body

# Errors that malformed input can provoke inside decoding and hashing code; verify()
# turns them into SignatureError so callers only ever see one exception type.
_MALFORMED = (ValueError, TypeError, UnicodeError, OverflowError, binascii.Error)


class Scheme:
    """Base class of the signature schemes. Subclasses implement ``_verify``."""

    name: str = ""
    content_types: frozenset[str] = frozenset({"application/json"})
    json_suffix: bool = False  # also accept any ``application/*+json`` media type
    event_id_path: str | None = None
    event_type_path: str | None = None
    timestamped: bool = False
    insecure: bool = False
    # For form bodies: the field whose value is the JSON event (GitHub's ``payload``).
    form_payload_field: str | None = None
    signs_url: bool = False  # the signature covers the URL the provider called
    # How the provider counts success: the code an accepted delivery (and every copy of it)
    # is answered with, and where the provider documents it. 204 carries no body.
    accept_status: int = 202
    accept_docs: str = ""
    summary: str = ""  # what the scheme verifies, for ``inbox sources schemes``
    # Where the provider's own event id and type are, as locations (header:NAME, json:PATH).
    event_id_from: tuple[str, ...] = ()
    event_type_from: tuple[str, ...] = ()
    # JSON paths the provider changes between retries of one delivery (HubSpot's
    # ``*.attemptNumber``): left out of the digest a copy must match.
    restamped: tuple[str, ...] = ()
    # A delivery without an Idempotency-Key or provider id is keyed by the digest of its
    # body (``match_digest``): the default for providers that send no id of their own.
    body_identity: bool = False

    def match_digest(self, body: bytes, parsed: object = _UNPARSED) -> bytes:
        """What a redelivery must match to be a copy (else it is a 422 conflict): the
        SHA-256 of the raw body, or, when the provider restamps fields on every attempt,
        of the JSON without them (key order and values kept, whitespace not). ``parsed``:
        the body's JSON when the caller has it already (it is not changed)."""
        if not self.restamped:
            return hashlib.sha256(body).digest()
        doc: Any = parsed
        if parsed is _UNPARSED:
            try:
                doc = json.loads(body)
            except (ValueError, UnicodeDecodeError):
                return hashlib.sha256(body).digest()
        for path in self.restamped:
            doc = jsonpath.redacted_copy(doc, path)
        canonical = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(b"restamped\n" + canonical.encode("utf-8")).digest()

    def accepts(self, content_type: str | None) -> bool:
        """Whether this scheme accepts the media type of a Content-Type header value."""
        media = (content_type or "").split(";", 1)[0].strip().lower()
        if media in self.content_types:
            return True
        return self.json_suffix and media.startswith("application/") and media.endswith("+json")

    def verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        """Authenticate ``req``; raise SignatureError (and nothing else) on any failure."""
        try:
            return self._verify(req, cfg, now)
        except SignatureError:
            raise
        except _MALFORMED as exc:
            raise SignatureError(f"malformed input ({type(exc).__name__})") from None

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        raise NotImplementedError

    def challenge(
        self, req: SignedRequest, parsed_body: object, verified: Verified | None = None
    ) -> Answer | None:
        """Called AFTER a successful verify (POST) with the parsed JSON body: return an
        Answer to a provider handshake instead of storing an event, else None."""
        return None

    def get_challenge(self, req: SignedRequest, cfg: SchemeConfig) -> Answer | None:
        """Called for a GET request: return an Answer for a provider's verification GET,
        else None (the caller answers 405)."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
