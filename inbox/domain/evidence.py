"""Evidence bundles: what an event's record proves, sealed so an auditor can check it offline.

A bundle is a set of named parts (bytes): the body as received (opened where it is sealed at
rest; empty once removed or erased: ``event.json`` then says ``body_stored`` "removed", or
"erased" with when, by whom and by which erasure), the headers as received minus
credentials, the verification verdict, the event's decision, its step results, its outbound
attempts and its audit trail. ``manifest.json`` lists the SHA-256 of every part and
``manifest.sig`` is an Ed25519 signature over the manifest's exact bytes by the export key.
``check`` needs no database: it recomputes every digest and the signature, and ``reverify``
runs the receiver's own signature scheme over the stored bytes with the source's secret.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from inbox.domain.errors import InboxError
from inbox.domain.signatures import Scheme, SchemeConfig, SignatureError, SignedRequest, scheme_for

FORMAT = "inbox-evidence/1"
# A retention report (a prune with its day drops, or an erasure): one part.
REPORT_FORMAT = "inbox-report/1"
REPORT_PARTS = ("report.json",)
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
# The parts, in the order the manifest lists them.
PARTS = (
    "event.json",
    "body.bin",
    "headers.json",
    "verification.json",
    "steps.json",
    "attempts.json",
    "audit.json",
)
# Headers a signature scheme reads that are kept with the verdict (never with the headers):
# MACs and signatures over the body, which prove the delivery and reveal no secret.
_SIGNATURE_HEADER = re.compile(r"signature|hmac", re.I)
_FORM = "application/x-www-form-urlencoded"


class EvidenceError(InboxError):
    """A bundle that does not verify; the message says which part and why."""


def signature_headers(
    scheme: Scheme, headers: Mapping[str, str], secrets: tuple[str, ...], token_header: str | None
) -> dict[str, str]:
    """The headers that carry the provider's signature, for re-verification: never a
    shared token (the token scheme, the source's token header, any value holding a secret)."""
    if scheme.name in ("token", "none"):
        return {}
    return {
        name: value
        for name, value in headers.items()
        if _SIGNATURE_HEADER.search(name)
        and name != token_header
        and not any(s and s in value for s in secrets)
    }


def verdict(
    scheme: Scheme,
    cfg: SchemeConfig,
    secret_ids: tuple[int, ...],
    matched: str | None,
    checked_at: float,
    key_digest: bytes | None,
    raw_sha256: bytes,
    signed: dict[str, str],
    url: str,
    recipe: dict[str, Any] | None,
) -> dict[str, Any]:
    """What the receiver decided about a request's authenticity, as stored with the event."""
    secret_id = None
    if matched is not None and matched in cfg.secrets:
        at = cfg.secrets.index(matched)
        secret_id = secret_ids[at] if at < len(secret_ids) else None
    return {
        "scheme": scheme.name,
        "verified": True,
        "secret_id": secret_id,
        "checked_at": checked_at,
        "tolerance": cfg.tolerance if scheme.timestamped else None,
        "key_digest": key_digest.hex() if key_digest is not None else None,
        "raw_sha256": raw_sha256.hex(),
        "signature_headers": signed,
        "url": url if scheme.signs_url else None,
        "header": cfg.header,
        "recipe": recipe,
    }


def _json(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, indent=2, default=str).encode() + b"\n"


def parts(
    detail: Mapping[str, Any], body: bytes | None, verification: Mapping[str, Any] | None
) -> dict[str, bytes]:
    """The parts of one event's bundle, from the read model's detail and the stored body."""
    event_keys = (
        "public_id",
        "tenant",
        "source",
        "event_type",
        "content_type",
        "received_at",
        "finished_at",
        "state",
        "outcome",
        "decision",
        "replay",
        "attempts",
        "duplicate_count",
        "first_duplicate_at",
        "last_duplicate_at",
        "duplicate_of",
        "newer_event",
        "conflicts",
        "body_sha256",
        "last_error_class",
        "last_error_message",
        "erased",
    )
    event = {k: detail.get(k) for k in event_keys}
    v = dict(verification or {})
    event["body_stored"] = (
        "erased"
        if detail.get("erased")
        else "removed"
        if body is None
        else "raw"
        if v.get("raw_sha256") == hashlib.sha256(body).hexdigest()
        else "redacted or not recorded"
    )
    return {
        "event.json": _json(event),
        "body.bin": body or b"",
        "headers.json": _json(detail.get("headers") or {}),
        "verification.json": _json(v or {"verified": None, "note": "received before verdicts"}),
        "steps.json": _json(detail.get("steps") or []),
        "attempts.json": _json(detail.get("deliveries") or []),
        "audit.json": _json(detail.get("audit") or []),
    }


def raw_public(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_id(public: Ed25519PublicKey) -> str:
    """A short name of an export key: the SHA-256 of its raw public bytes, 16 hex digits."""
    return hashlib.sha256(raw_public(public)).hexdigest()[:16]


def seal(
    files: Mapping[str, bytes], public_id: str, key: Ed25519PrivateKey, fmt: str = FORMAT
) -> dict[str, bytes]:
    """The bundle: the parts, the manifest of their digests, the manifest's signature (an
    event's bundle, or with ``fmt`` REPORT_FORMAT a retention report's)."""
    public = key.public_key()
    manifest = {
        "format": fmt,
        "report" if fmt == REPORT_FORMAT else "event": public_id,
        "key_id": key_id(public),
        "public_key": base64.b64encode(raw_public(public)).decode(),
        "sha256": {name: hashlib.sha256(files[name]).hexdigest() for name in _PARTS[fmt]},
    }
    raw = _json(manifest)
    return {**files, MANIFEST: raw, SIGNATURE: base64.b64encode(key.sign(raw)) + b"\n"}


_PARTS = {FORMAT: PARTS, REPORT_FORMAT: REPORT_PARTS}


@dataclass(frozen=True)
class Checked:
    """A bundle that verified: whose event (or which report), under which key."""

    event: str
    key_id: str
    pinned: bool  # the key was the one the auditor gave, not only the one in the bundle


def check(bundle: Mapping[str, bytes], pinned: Ed25519PublicKey | None = None) -> Checked:
    """Verify the manifest's signature and every part's digest; raise EvidenceError."""
    for name in (MANIFEST, SIGNATURE):
        if name not in bundle:
            raise EvidenceError(f"{name} is missing")
    try:
        manifest = json.loads(bundle[MANIFEST])
        embedded = Ed25519PublicKey.from_public_bytes(base64.b64decode(manifest["public_key"]))
        signature = base64.b64decode(bundle[SIGNATURE].strip(), validate=True)
    except (ValueError, KeyError, TypeError) as exc:
        raise EvidenceError(f"{MANIFEST} or {SIGNATURE} is malformed ({exc})") from None
    parts = _PARTS.get(manifest.get("format"))
    if parts is None:
        raise EvidenceError(f"unknown format {manifest.get('format')!r}")
    key = pinned or embedded
    if pinned is not None and key_id(pinned) != key_id(embedded):
        raise EvidenceError(f"signed by key {key_id(embedded)}, not the given key {key_id(pinned)}")
    try:
        key.verify(signature, bundle[MANIFEST])
    except InvalidSignature:
        raise EvidenceError(f"the signature does not match {MANIFEST}") from None
    extra = set(bundle) - {*parts, MANIFEST, SIGNATURE}
    if extra:
        raise EvidenceError(f"files not in {MANIFEST}: {', '.join(sorted(extra))}")
    digests = manifest.get("sha256") or {}
    if set(digests) != set(parts):
        raise EvidenceError(f"{MANIFEST} does not list exactly the parts {', '.join(parts)}")
    for name in parts:
        if name not in bundle:
            raise EvidenceError(f"{name} is missing")
        if hashlib.sha256(bundle[name]).hexdigest() != digests[name]:
            raise EvidenceError(f"{name} does not match its digest in {MANIFEST}")
    return Checked(manifest.get("event") or manifest["report"], key_id(key), pinned is not None)


def reverify(bundle: Mapping[str, bytes], secret: str) -> str:
    """Run the receiver's scheme over the stored body and headers with ``secret``, at the
    time of receipt; return the scheme's name, or raise EvidenceError saying why not."""
    if "verification.json" not in bundle:
        raise EvidenceError("a retention report carries no provider signature to re-verify")
    v = json.loads(bundle["verification.json"])
    if not v.get("scheme"):
        raise EvidenceError("the bundle holds no verdict (the event predates them)")
    event = json.loads(bundle["event.json"])
    if event.get("body_stored") != "raw":
        raise EvidenceError(f"the stored body is not the raw body ({event.get('body_stored')})")
    if not v.get("signature_headers") and v["scheme"] != "none":
        raise EvidenceError(f"no signature was kept for scheme {v['scheme']}")
    headers = {**json.loads(bundle["headers.json"]), **v["signature_headers"]}
    scheme = scheme_for(v["scheme"], v.get("recipe"))
    cfg = SchemeConfig(
        secrets=(secret,), tolerance=v.get("tolerance") or 300, header=v.get("header")
    )
    body = bundle["body.bin"]
    form: dict[str, list[str]] = {}
    if headers.get("content-type", "").split(";", 1)[0].strip().lower() == _FORM:
        form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    req = SignedRequest("POST", v.get("url") or "", headers, body, form)
    try:
        scheme.verify(req, cfg, float(v["checked_at"]))
    except SignatureError as exc:
        raise EvidenceError(f"the provider's signature does not verify: {exc}") from None
    return scheme.name
