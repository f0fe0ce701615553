"""GitHub: ``x-hub-signature-256: sha256=<hex>`` HMAC-SHA256 over the body."""

from __future__ import annotations

from ._common import decode_hex, header, hmac_sha256, optional_header, require_match
from .base import Scheme, SchemeConfig, SignatureError, SignedRequest, Verified

_PREFIX = "sha256="


class GitHubScheme(Scheme):
    name = "github"
    content_types = frozenset({"application/json", "application/x-www-form-urlencoded"})
    # A hook with content type ``form`` posts ``payload=<JSON>``; the signature covers the
    # raw form body and the JSON in that field is what is read for type, id and keys.
    form_payload_field = "payload"

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        value = header(req, "x-hub-signature-256")
        if not value.startswith(_PREFIX):
            raise SignatureError("x-hub-signature-256 lacks the sha256= prefix")
        received = decode_hex(value[len(_PREFIX) :])
        require_match([received], cfg, lambda secret: hmac_sha256(secret, req.body))
        return Verified(
            event_id=optional_header(req, "x-github-delivery"),
            event_type=optional_header(req, "x-github-event"),
        )
