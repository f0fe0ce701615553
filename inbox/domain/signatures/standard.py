"""Standard Webhooks (Svix): ``v1,<base64>`` HMAC-SHA256 over ``{id}.{timestamp}.{body}``.

We use the ``standardwebhooks`` library only to decode the ``whsec_`` secret and compute
the expected signature. We do not call ``Webhook.verify``: it reads the real clock with a
fixed five-minute tolerance, and on malformed input it raises errors other than its own
(UnicodeDecodeError for non-UTF-8 bodies, ValueError from splitting an entry without a
comma, binascii.Error from bad base64). Header parsing, the window and the comparison are
done here instead.
"""

from __future__ import annotations

from datetime import UTC, datetime

from standardwebhooks.webhooks import (
    EmptyWebhookSecretError,
    Webhook,
    WebhookVerificationError,
)

from ._common import check_window, decode_b64, header, require_match, try_decode
from .base import Scheme, SchemeConfig, SignatureError, SignedRequest, Verified


def _v1_signatures(value: str) -> list[str]:
    """The base64 parts of the ``v1`` entries; other versions and comma-less entries skipped."""
    out = []
    for entry in value.split(" "):
        version, sep, signature = entry.partition(",")
        if sep and version == "v1":
            out.append(signature)
    return out


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
    content_types = frozenset({"application/json"})
    json_suffix = True
    timestamped = True

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        prefix = "webhook-" if "webhook-signature" in req.headers else "svix-"
        msg_id = header(req, prefix + "id")
        ts = check_window(header(req, prefix + "timestamp"), now, cfg.tolerance)
        candidates = try_decode(decode_b64, _v1_signatures(header(req, prefix + "signature")))
        try:
            body = req.body.decode("utf-8")
        except UnicodeDecodeError:
            raise SignatureError("body is not UTF-8") from None
        require_match(candidates, cfg, lambda secret: _expected(secret, msg_id, ts, body))
        return Verified(event_id=msg_id)
