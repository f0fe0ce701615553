"""Shopify: ``x-shopify-hmac-sha256: <base64 HMAC-SHA256 of the body>``."""

from __future__ import annotations

from ._common import decode_b64, header, hmac_sha256, optional_header, require_match
from .base import Scheme, SchemeConfig, SignedRequest, Verified


class ShopifyScheme(Scheme):
    name = "shopify"
    content_types = frozenset({"application/json"})

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        # The newer (Events) deliveries name their headers shopify-* instead of x-shopify-*.
        name = "x-shopify-hmac-sha256"
        if name not in req.headers and "shopify-hmac-sha256" in req.headers:
            name = "shopify-hmac-sha256"
        received = decode_b64(header(req, name))
        require_match([received], cfg, lambda secret: hmac_sha256(secret, req.body))
        return Verified(
            event_id=optional_header(
                req,
                "x-shopify-webhook-id",
                "shopify-webhook-id",
                "x-shopify-event-id",
                "shopify-event-id",
            ),
            event_type=optional_header(req, "x-shopify-topic", "shopify-topic"),
        )
