"""Standard Webhooks (Svix): ``v1,<base64>`` HMAC-SHA256 over ``{id}.{timestamp}.{body}``.

We use the ``standardwebhooks`` library only to decode the ``whsec_`` secret and compute
the expected signature. We do not call ``Webhook.verify``: it reads the real clock with a
fixed five-minute tolerance, and on malformed input it raises errors other than its own
(UnicodeDecodeError for non-UTF-8 bodies, ValueError from splitting an entry without a
comma, binascii.Error from bad base64). Header parsing, the window and the comparison are
done here instead.

Version ``v1a`` (asymmetric) signs the same string with Ed25519; a receiver holds the
sender's public key as ``whpk_<base64 of the 32 raw bytes>``. A source may list ``whsec_``
secrets and ``whpk_`` keys together (a sender moving from one to the other): entries are
checked against the kind of key their version names, and any match passes. The reference
libraries do not verify v1a yet, so this is written here with ``cryptography``.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import replace
from datetime import UTC, datetime

from standardwebhooks.webhooks import (
    EmptyWebhookSecretError,
    Webhook,
    WebhookVerificationError,
)

from ._common import check_window, decode_b64, header, require_match, try_decode
from .asymmetric import ed25519_key, require_signed
from .base import Scheme, SchemeConfig, SignatureError, SignedRequest, Verified

_PUBLIC = "whpk_"


def _v1_signatures(value: str, version: str = "v1") -> list[str]:
    """The base64 parts of one version's entries; others and comma-less entries skipped."""
    out = []
    for entry in value.split(" "):
        found, sep, signature = entry.partition(",")
        if sep and found == version:
            out.append(signature)
    return out


def _verify_v1a(secret: str, signature: bytes, message: bytes) -> None:
    raw = secret[len(_PUBLIC) :]
    try:
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("undecodable whpk_ key") from None
    ed25519_key(key).verify(signature, message)


def _expected(secret: str, msg_id: str, ts: int, body: str) -> bytes:
    try:
        when = datetime.fromtimestamp(ts, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise SignatureError("timestamp out of range") from None
    try:
        signed = Webhook(secret).sign(msg_id, when, body)
    except (EmptyWebhookSecretError, WebhookVerificationError, ValueError, RuntimeError):
        raise SignatureError("undecodable webhook secret") from None
    return decode_b64(signed.partition(",")[2])


class StandardScheme(Scheme):
    name = "standard"
    summary = (
        "HMAC-SHA256 (v1, whsec_) or Ed25519 (v1a, whpk_) of {id}.{timestamp}.{body}"
        " in webhook-signature (or svix-signature)"
    )
    content_types = frozenset({"application/json"})
    json_suffix = True
    event_id_from = ("header:webhook-id", "header:svix-id")
    timestamped = True
    accept_docs = (
        "https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md"
        ": any 2xx is a successful delivery; other codes (and timeouts) are retried"
    )

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        prefix = "webhook-" if "webhook-signature" in req.headers else "svix-"
        msg_id = header(req, prefix + "id")
        ts_text = header(req, prefix + "timestamp")
        ts = check_window(ts_text, now, cfg.tolerance)
        value = header(req, prefix + "signature")
        keys = [s for s in cfg.secrets if s.startswith(_PUBLIC)]
        hmac_cfg = replace(cfg, secrets=tuple(s for s in cfg.secrets if not s.startswith(_PUBLIC)))
        v1a = try_decode(decode_b64, _v1_signatures(value, "v1a"))
        if keys and v1a:
            message = f"{msg_id}.{ts_text}.".encode() + req.body
            try:
                secret = require_signed(v1a, keys, message, _verify_v1a)
                return Verified(event_id=msg_id, secret=secret)
            except SignatureError:
                if not hmac_cfg.secrets:
                    raise
        candidates = try_decode(decode_b64, _v1_signatures(value))
        try:
            body = req.body.decode("utf-8")
        except UnicodeDecodeError:
            raise SignatureError("body is not UTF-8") from None
        secret = require_match(
            candidates, hmac_cfg, lambda secret: _expected(secret, msg_id, ts, body)
        )
        return Verified(event_id=msg_id, secret=secret)
