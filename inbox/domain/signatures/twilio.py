"""Twilio: ``x-twilio-signature`` = base64 HMAC over the URL plus the sorted params.

Form posts sign ``url + key1 + value1 + key2 + value2 ...`` (keys sorted, a repeated
key's values sorted). JSON posts carry ``bodySHA256=<hex sha256 of body>`` in the query
string: the signature covers the URL alone and the body must hash to that value.

Like twilio's own ``RequestValidator``, the URL is tried as received, without its port and
with the scheme's default port added (``:443`` / ``:80``): Twilio signs whichever form the
webhook was configured with. The hash is HMAC-SHA1 keyed by the Auth Token, unless the
request carries ``X-Twilio-Webhooks-Signature-Settings: key=...,algorithm=HMAC_SHA256``
(Webhook Settings with a SharedKey, a Public Beta): then the header's algorithm is used
and the SharedKey's secret must be one of the source's secrets (``key=`` is not needed:
every configured secret is tried). An algorithm other than HMAC_SHA1/HMAC_SHA256 fails.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ._common import decode_b64, header, optional_header, require_match
from .base import Scheme, SchemeConfig, SignatureError, SignedRequest, Verified

_FORM = "application/x-www-form-urlencoded"
_SETTINGS = "x-twilio-webhooks-signature-settings"
_ALGORITHMS = {"HMAC_SHA1": hashlib.sha1, "HMAC_SHA256": hashlib.sha256}
_DEFAULT_PORT = {"https": "443", "http": "80"}


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


def url_variants(url: str) -> list[str]:
    """``url`` as given, without its port, and with the scheme's default port added."""
    start = url.find("://")
    if start <= 0:
        return [url]
    scheme, rest = url[:start].lower(), url[start + 3 :]
    cut = next((i for i, ch in enumerate(rest) if ch in "/?#"), len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    userinfo, at, hostport = netloc.rpartition("@")
    host, colon, port = hostport.rpartition(":")
    if not colon or "]" in port or not port.isdigit():  # no port (or an IPv6 literal)
        host, port = hostport, ""
    prefix = url[: start + 3] + userinfo + at
    out = [url, prefix + host + tail]
    if not port and scheme in _DEFAULT_PORT:
        out.append(prefix + host + ":" + _DEFAULT_PORT[scheme] + tail)
    return list(dict.fromkeys(out))


def _algorithm(req: SignedRequest) -> Callable[[], Any]:
    """HMAC-SHA1 unless the Signature-Settings header names another algorithm."""
    settings = req.headers.get(_SETTINGS)
    if settings is None:
        return hashlib.sha1
    fields = dict(item.strip().partition("=")[::2] for item in settings.split(","))
    name = fields.get("algorithm", "").strip().upper()
    if name not in _ALGORITHMS:
        raise SignatureError("unsupported algorithm in x-twilio-webhooks-signature-settings")
    return _ALGORITHMS[name]


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
    summary = "HMAC-SHA1 (or SHA-256 by Signature-Settings) base64 of URL + sorted form params"
    content_types = frozenset({_FORM, "application/json"})
    signs_url = True
    event_id_from = ("header:i-twilio-idempotency-token",)
    # A JSON body is neither TwiML nor accepted by a voice callback: no body at all.
    accept_status = 204
    accept_docs = (
        "https://www.twilio.com/docs/api/errors/15003: respond to callbacks with 200 OK and"
        " valid TwiML, or with 204 No Content and an empty body"
    )

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        received = decode_b64(header(req, "x-twilio-signature"))
        url = signed_url(req.url, cfg.public_url)
        params = {} if _check_body_hash(req, url) else _form_params(req)
        digest = _algorithm(req)
        datas = [_signed_data(variant, params) for variant in url_variants(url)]

        def expected(secret: str) -> list[bytes]:
            key = secret.encode("utf-8")
            return [hmac.new(key, data, digest).digest() for data in datas]

        require_match([received], cfg, expected)
        return Verified(event_id=optional_header(req, "i-twilio-idempotency-token"))
