"""The providers that sign with a private key: what a recipe cannot say.

The source's "secrets" are the provider's PUBLIC keys here: Discord's application public
key (hex), SendGrid's verification key (base64 DER SubjectPublicKeyInfo, or PEM) and
Standard Webhooks' ``whpk_`` keys. Verification is the ``cryptography`` package's.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import load_der_public_key, load_pem_public_key

from ._common import check_window, decode_b64, decode_hex, header
from .base import Answer, Scheme, SchemeConfig, SignatureError, SignedRequest, Verified

_KEY_ERRORS = (ValueError, TypeError, binascii.Error, UnsupportedAlgorithm)


def ed25519_key(raw: bytes) -> ed25519.Ed25519PublicKey:
    try:
        return ed25519.Ed25519PublicKey.from_public_bytes(raw)
    except _KEY_ERRORS:
        raise SignatureError("undecodable public key") from None


def _ed25519_hex(secret: str) -> ed25519.Ed25519PublicKey:
    try:
        return ed25519_key(bytes.fromhex(secret.strip()))
    except ValueError:
        raise SignatureError("undecodable public key") from None


def _p256(secret: str) -> ec.EllipticCurvePublicKey:
    text = secret.strip()
    try:
        if text.startswith("-----BEGIN"):
            key = load_pem_public_key(text.encode("ascii"))
        else:
            key = load_der_public_key(base64.b64decode(text, validate=True))
    except _KEY_ERRORS:
        raise SignatureError("undecodable public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise SignatureError("the verification key is not a P-256 key")
    return key


def require_signed(
    signatures: Iterable[bytes],
    secrets: Iterable[str],
    message: bytes,
    verify: Callable[[str, bytes, bytes], None],
) -> str:
    """Pass if any signature verifies under any key; return that key's secret text.
    ``verify(secret, signature, message)`` raises InvalidSignature or SignatureError."""
    received = list(signatures)
    keys = [s for s in secrets if s]
    if not received:
        raise SignatureError("no usable signature in the request")
    if not keys:
        raise SignatureError("no public key configured")
    usable = False
    for secret in keys:
        for signature in received:
            try:
                verify(secret, signature, message)
            except InvalidSignature:
                usable = True
                continue
            except SignatureError:  # this key does not decode: try the others
                break
            return secret
    raise SignatureError("signature mismatch" if usable else "no usable public key configured")


def _verify_ed25519_hex(secret: str, signature: bytes, message: bytes) -> None:
    _ed25519_hex(secret).verify(signature, message)


def _verify_p256(secret: str, signature: bytes, message: bytes) -> None:
    _p256(secret).verify(signature, message, ec.ECDSA(hashes.SHA256()))


class _DiscordBase(Scheme):
    """Ed25519 over ``{X-Signature-Timestamp}{body}``; the key is the application's public
    key in hex. Discord documents no tolerance; the source's (default 300 s) applies."""

    timestamped = True

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        ts = header(req, "x-signature-timestamp")
        check_window(ts, now, cfg.tolerance)
        signature = decode_hex(header(req, "x-signature-ed25519"))
        message = ts.encode("ascii") + req.body
        secret = require_signed([signature], cfg.secrets, message, _verify_ed25519_hex)
        return Verified(secret=secret)


class DiscordScheme(_DiscordBase):
    name = "discord"
    summary = "Ed25519 (hex) of {X-Signature-Timestamp}{body}, webhook events; PING (type 0) -> 204"
    event_type_path = "event.type"
    event_type_from = ("json:event.type",)
    accept_status = 204
    accept_docs = (
        "https://docs.discord.com/developers/events/webhook-events: acknowledge each event with"
        " 204 No Content (empty body) within 3 seconds, else it is retried"
    )
    body_identity = True  # webhook events carry no id of their own

    def challenge(
        self, req: SignedRequest, parsed_body: object, verified: Verified | None = None
    ) -> Answer | None:
        if isinstance(parsed_body, dict) and parsed_body.get("type") == 0:
            return Answer(204, None)
        return None


class DiscordInteractionsScheme(_DiscordBase):
    name = "discord-interactions"
    summary = (
        "Ed25519 (hex) of {X-Signature-Timestamp}{body}, interactions; PING (type 1) -> {type: 1}"
    )
    event_id_path = "id"
    event_type_path = "type"
    event_id_from = ("json:id",)
    event_type_from = ("json:type",)
    accept_docs = (
        "https://docs.discord.com/developers/interactions/receiving-and-responding: an"
        " interaction needs an interaction response within 3 seconds, which the inbox does not"
        " give (only PING is answered); 202 acknowledges the delivery"
    )

    def challenge(
        self, req: SignedRequest, parsed_body: object, verified: Verified | None = None
    ) -> Answer | None:
        if isinstance(parsed_body, dict) and parsed_body.get("type") == 1:
            return Answer(200, {"type": 1})
        return None


class SendGridScheme(Scheme):
    """SendGrid's signed Event Webhook: ECDSA P-256/SHA-256, base64 DER signature over
    ``{timestamp}{body}``. A request is a JSON array of events: it is stored as one event
    keyed by the first ``sg_event_id``."""

    name = "sendgrid"
    summary = (
        "ECDSA P-256 (base64 DER) of {timestamp}{body} in X-Twilio-Email-Event-Webhook-Signature"
    )
    timestamped = True
    event_id_path = "0.sg_event_id"
    event_type_path = "0.event"
    event_id_from = ("json:0.sg_event_id",)
    event_type_from = ("json:0.event",)
    accept_docs = (
        "https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook"
        ": a 2xx; any other answer is retried for up to 24 hours"
    )

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        ts = header(req, "x-twilio-email-event-webhook-timestamp")
        check_window(ts, now, cfg.tolerance)
        signature = decode_b64(header(req, "x-twilio-email-event-webhook-signature"))
        message = ts.encode("ascii") + req.body
        return Verified(secret=require_signed([signature], cfg.secrets, message, _verify_p256))
