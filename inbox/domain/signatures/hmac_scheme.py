"""A tenant's own systems: ``x-signature`` = hex HMAC-SHA256 over ``{x-timestamp}.{body}``."""

from __future__ import annotations

from ._common import check_window, decode_hex, header, hmac_sha256, require_match
from .base import Scheme, SchemeConfig, SignedRequest, Verified


class HmacScheme(Scheme):
    name = "hmac"
    content_types = frozenset({"application/json"})
    timestamped = True

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        ts_text = header(req, "x-timestamp")
        check_window(ts_text, now, cfg.tolerance)
        received = decode_hex(header(req, "x-signature"))
        payload = ts_text.encode("ascii") + b"." + req.body
        require_match([received], cfg, lambda secret: hmac_sha256(secret, payload))
        return Verified()
