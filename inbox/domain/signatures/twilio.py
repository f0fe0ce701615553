"""Twilio: ``x-twilio-signature`` = base64 HMAC-SHA1 over the URL plus the sorted params.

Form posts sign ``url + key1 + value1 + key2 + value2 ...`` (keys sorted, a repeated
key's values sorted). JSON posts carry ``bodySHA256=<hex sha256 of body>`` in the query
string: the signature covers the URL alone and the body must hash to that value.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from urllib.parse import parse_qs, urlsplit

from ._common import decode_b64, header, hmac_sha1, optional_header, require_match
from .base import Scheme, SchemeConfig, SignatureError, SignedRequest, Verified

_FORM = "application/x-www-form-urlencoded"


def _path_start(url: str) -> int:
    """Index where the path (or query) begins in an absolute URL."""
    scheme_end = url.find("://")
    if scheme_end <= 0:
        raise SignatureError("request URL is not absolute")
    for i in range(scheme_end + 3, len(url)):
        if url[i] in "/?#":
            return i
    return len(url)


def signed_url(url: str, public_url: str | None) -> str:
    """The URL Twilio signed: ``url`` with its scheme and host replaced by ``public_url``."""
    if not public_url:
        return url
    base = public_url.rstrip("/")
    parts = urlsplit(base)
    if not parts.scheme or not parts.netloc or parts.path or parts.query:
        raise SignatureError("public_url must be scheme://host[:port]")
    return base + url[_path_start(url) :]


def _form_params(req: SignedRequest) -> Mapping[str, list[str]]:
    if req.form:
        return req.form
    media = req.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != _FORM or not req.body:
        return {}
    return parse_qs(req.body.decode("utf-8"), keep_blank_values=True, errors="strict")


def _signed_data(url: str, params: Mapping[str, list[str]]) -> bytes:
    parts = [url]
    for key in sorted(params):
        for value in sorted(params[key]):
            parts.append(key + value)
    return "".join(parts).encode("utf-8")


def _check_body_hash(req: SignedRequest, url: str) -> bool:
    """If the URL carries ``bodySHA256``, require the body to match it; report if it did."""
    values = parse_qs(urlsplit(url).query, keep_blank_values=True).get("bodySHA256")
    if values is None:
        return False
    if len(values) != 1:
        raise SignatureError("bodySHA256 given more than once")
    actual = hashlib.sha256(req.body).hexdigest()
    if not hmac.compare_digest(actual.encode(), values[0].lower().encode("utf-8")):
        raise SignatureError("body does not match bodySHA256")
    return True


class TwilioScheme(Scheme):
    name = "twilio"
    content_types = frozenset({_FORM, "application/json"})

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        received = decode_b64(header(req, "x-twilio-signature"))
        url = signed_url(req.url, cfg.public_url)
        params = {} if _check_body_hash(req, url) else _form_params(req)
        data = _signed_data(url, params)
        require_match([received], cfg, lambda secret: hmac_sha1(secret, data))
        return Verified(event_id=optional_header(req, "i-twilio-idempotency-token"))
