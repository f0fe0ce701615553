"""Stripe: ``stripe-signature: t=<ts>,v1=<hex>[,v1=<hex>...]`` over ``{t}.{body}``."""

from __future__ import annotations

from ._common import check_window, decode_hex, header, hmac_sha256, require_match, try_decode
from .base import Scheme, SchemeConfig, SignatureError, SignedRequest, Verified


def _parse(value: str) -> tuple[str, list[str]]:
    """The single ``t`` value and every ``v1`` value; items without ``=`` are ignored."""
    stamps: list[str] = []
    v1: list[str] = []
    for item in value.split(","):
        key, sep, val = item.partition("=")
        if not sep:
            continue
        if key == "t":
            stamps.append(val)
        elif key == "v1":
            v1.append(val)
    if len(stamps) != 1:
        raise SignatureError("stripe-signature needs exactly one t=")
    return stamps[0], v1


class StripeScheme(Scheme):
    name = "stripe"
    content_types = frozenset({"application/json"})
    event_id_path = "id"
    event_type_path = "type"
    timestamped = True

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        ts_text, v1 = _parse(header(req, "stripe-signature"))
        check_window(ts_text, now, cfg.tolerance)
        payload = ts_text.encode("ascii") + b"." + req.body
        require_match(try_decode(decode_hex, v1), cfg, lambda secret: hmac_sha256(secret, payload))
        return Verified()
