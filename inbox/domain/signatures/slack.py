"""Slack: ``x-slack-signature: v0=<hex>`` over ``v0:{timestamp}:{body}``."""

from __future__ import annotations

from ._common import check_window, decode_hex, header, hmac_sha256, require_match
from .base import Scheme, SchemeConfig, SignatureError, SignedRequest, Verified

_PREFIX = "v0="


class SlackScheme(Scheme):
    name = "slack"
    content_types = frozenset({"application/json", "application/x-www-form-urlencoded"})
    event_id_path = "event_id"
    event_type_path = "event.type"
    timestamped = True

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        ts_text = header(req, "x-slack-request-timestamp")
        check_window(ts_text, now, cfg.tolerance)
        value = header(req, "x-slack-signature")
        if not value.startswith(_PREFIX):
            raise SignatureError("x-slack-signature lacks the v0= prefix")
        received = decode_hex(value[len(_PREFIX) :])
        base = b"v0:" + ts_text.encode("ascii") + b":" + req.body
        require_match([received], cfg, lambda secret: hmac_sha256(secret, base))
        return Verified()

    def challenge(
        self, req: SignedRequest, parsed_body: object
    ) -> tuple[int, dict[str, object]] | None:
        """Answer the Events API ``url_verification`` handshake by echoing its challenge."""
        if not isinstance(parsed_body, dict) or parsed_body.get("type") != "url_verification":
            return None
        value = parsed_body.get("challenge")
        if not isinstance(value, str):
            return None
        return 200, {"challenge": value}
