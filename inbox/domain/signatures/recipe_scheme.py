"""The scheme that runs a recipe: one engine for every HMAC-, token- or Basic-style provider."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import time
from datetime import datetime
from typing import Any

from ._common import decode_b64, decode_hex, hmac_of, require_match, try_decode
from .base import Answer, Scheme, SchemeConfig, SignatureError, SignedRequest, Verified
from .recipe import Recipe
from .template import Context, parse_template
from .twilio import signed_url

_DIGESTS = {"sha1": hashlib.sha1, "sha256": hashlib.sha256, "sha512": hashlib.sha512}
_DEFAULT_TOLERANCE = 300  # SchemeConfig's default: a source that did not set its own
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)")


def _decode_b64url(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise SignatureError("signature is not base64url") from None


_DECODERS = {"hex": decode_hex, "base64": decode_b64, "base64url": _decode_b64url}


def _epoch(text: str, unit: str) -> float:
    if unit == "rfc3339":
        if not _RFC3339.fullmatch(text):
            raise SignatureError("timestamp is not RFC 3339")
        # Python parses at most microseconds: cut nanoseconds (Twitch sends nine digits).
        head, dot, rest = text.partition(".")
        if dot:
            digits = re.match(r"\d+", rest)
            assert digits is not None
            text = head + "." + digits.group()[:6] + rest[digits.end() :]
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    if not re.fullmatch(r"[0-9]{1,16}", text):
        raise SignatureError("timestamp is not an integer")
    return int(text) / (1000 if unit == "ms" else 1)


class RecipeScheme(Scheme):
    """A Scheme whose every rule comes from a Recipe."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.name = recipe.name
        self.summary = recipe.summary
        self.content_types = frozenset(recipe.content_types)
        self.json_suffix = recipe.json_suffix
        self.form_payload_field = recipe.form_payload_field
        self.timestamped = recipe.timestamp is not None
        self.signs_url = "{url}" in recipe.signed
        self.accept_status = recipe.accept_status
        self.accept_docs = recipe.accept_docs or ""
        self.restamped = recipe.restamped
        self.body_identity = recipe.body_identity
        self._signed = parse_template(recipe.signed, "signed")
        # Locations as (kind, arg, as written), split once rather than per request.
        self._signature_at = tuple((*loc.partition(":")[::2], loc) for loc in recipe.signature)
        ts = recipe.timestamp
        self._timestamp_at = ts.source.partition(":")[::2] if ts is not None else ("", "")
        self._digest = _DIGESTS[recipe.algorithm]
        self.event_id_from = recipe.event_id
        self.event_type_from = recipe.event_type
        self.event_id_path = _json_path(recipe.event_id)
        self.event_type_path = _json_path(recipe.event_type)

    # ------------------------------------------------------------------ verification

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        ctx = Context(req, url=signed_url(req.url, cfg.public_url) if self.signs_url else "")
        secret = self._check(req, cfg, now, ctx)
        return Verified(
            event_id=_first_header(req, self.recipe.event_id),
            event_type=_first_header(req, self.recipe.event_type),
            secret=secret,
        )

    def _check(self, req: SignedRequest, cfg: SchemeConfig, now: float, ctx: Context) -> str:
        recipe = self.recipe
        if recipe.auth == "basic":
            return self._basic(req, cfg)
        value, location = self._signature_value(ctx)
        if recipe.auth == "token":
            return require_match([value.encode("utf-8")], cfg, lambda s: s.encode("utf-8"))
        items = self._items(value, location)
        if recipe.timestamp is not None:
            ctx.timestamp = self._timestamp(ctx, items, cfg, now)
        message = ctx.render(self._signed)
        candidates = try_decode(_DECODERS[recipe.encoding], items.get("", []))
        return require_match(candidates, cfg, lambda s: self._mac(s, message))

    def _signature_value(self, ctx: Context) -> tuple[str, str]:
        for kind, arg, location in self._signature_at:
            value = ctx.lookup(kind, arg)
            if value:
                if not value.isascii():
                    raise SignatureError(f"non-ASCII signature in {location}")
                return value, location
        raise SignatureError(f"missing signature ({' or '.join(self.recipe.signature)})")

    def _items(self, value: str, location: str) -> dict[str, list[str]]:
        """The signatures under key "" and, for formatted values, the other items by key."""
        recipe, fmt = self.recipe, self.recipe.signature_format
        prefix = recipe.signature_prefix
        if fmt is None:
            if not value.startswith(prefix):
                raise SignatureError(f"{location} lacks the {prefix} prefix")
            return {"": [value[len(prefix) :]]}
        out: dict[str, list[str]] = {"": []}
        for item in value.split(fmt.separator):
            key, sep, val = item.strip().partition(fmt.assign)
            if not sep:
                continue
            if key in fmt.keys and val.startswith(prefix):
                out[""].append(val[len(prefix) :])
            else:
                out.setdefault(key, []).append(val)
        return out

    def _timestamp(
        self, ctx: Context, items: dict[str, list[str]], cfg: SchemeConfig, now: float
    ) -> str:
        ts = self.recipe.timestamp
        assert ts is not None
        kind, arg = self._timestamp_at
        if kind == "signature":
            found = items.get(arg, [])
            if len(found) != 1:
                raise SignatureError(f"the signature needs exactly one {arg}=")
            text: str | None = found[0]
        else:
            text = ctx.lookup(kind, arg)
        if not text:
            raise SignatureError(f"missing timestamp ({ts.source})")
        # A source's own tolerance wins over the recipe's (300 is the unset default).
        tolerance = ts.tolerance if cfg.tolerance == _DEFAULT_TOLERANCE else cfg.tolerance
        age = now - _epoch(text, ts.unit)
        if age > tolerance or (ts.future and -age > tolerance):
            raise SignatureError("timestamp outside the tolerance window")
        return text

    def _key(self, secret: str) -> bytes:
        recipe = self.recipe
        text = secret
        if recipe.secret_prefix and text.startswith(recipe.secret_prefix):
            text = text[len(recipe.secret_prefix) :]
        if recipe.secret_encoding == "base64":
            try:
                return base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise SignatureError("undecodable secret") from None
        if recipe.secret_encoding == "hex":
            return bytes.fromhex(text)
        return text.encode("utf-8")

    def _mac(self, secret: str, message: bytes) -> bytes:
        return hmac_of(self._key(secret), self.recipe.algorithm, message)

    def _basic(self, req: SignedRequest, cfg: SchemeConfig) -> str:
        value = req.headers.get("authorization", "")
        scheme, _, encoded = value.partition(" ")
        if scheme.lower() != "basic" or not encoded:
            raise SignatureError("missing Basic authorization")
        return require_match([decode_b64(encoded.strip())], cfg, lambda s: s.encode("utf-8"))

    # ------------------------------------------------------------------ handshakes

    def challenge(
        self, req: SignedRequest, parsed_body: object, verified: Verified | None = None
    ) -> Answer | None:
        secret = verified.secret if verified else None
        return self._answer(req, "POST", secret, parsed_body)

    def get_challenge(self, req: SignedRequest, cfg: SchemeConfig) -> Answer | None:
        for rule in self.recipe.handshake:
            if rule.method != "GET" or not self._matches(rule.when, Context(req)):
                continue
            secret: str | None = None
            if rule.check == "signature":
                secret = self.verify(req, cfg, time.time()).secret
            elif rule.check != "none":
                kind, _, arg = rule.check.partition(":")
                given = (Context(req).lookup(kind, arg) or "").encode("utf-8")
                secret = require_match([given], cfg, lambda s: s.encode("utf-8"))
            return self._answer(req, "GET", secret)
        return None

    def _answer(
        self, req: SignedRequest, method: str, secret: str | None, parsed: object = None
    ) -> Answer | None:
        """The first rule of ``method`` whose conditions hold, rendered. ``parsed`` is the
        JSON the inbox read from the body (GitHub's form payload included)."""
        for rule in self.recipe.handshake:
            key = self._key(secret) if secret else None
            ctx = Context(req, secret_key=key, digest=self._digest, _json=parsed, _parsed=True)
            if rule.method != method or not self._matches(rule.when, ctx):
                continue
            if rule.text is not None:
                body: Any = ctx.render(parse_template(rule.text, "text", answer=True)).decode()
            elif rule.json is not None:
                body = _render_tree(rule.json, ctx)
            else:
                body = None
            return Answer(rule.status, body)
        return None

    @staticmethod
    def _matches(when: tuple[tuple[str, str | None], ...], ctx: Context) -> bool:
        for location, expected in when:
            kind, _, arg = location.partition(":")
            value = ctx.lookup(kind, arg)
            if value is None or (expected is not None and value != expected):
                return False
        return True


def _render_tree(node: Any, ctx: Context) -> Any:
    if isinstance(node, str):
        return ctx.render(parse_template(node, "json", answer=True)).decode("utf-8")
    if isinstance(node, dict):
        return {key: _render_tree(value, ctx) for key, value in node.items()}
    if isinstance(node, list):
        return [_render_tree(value, ctx) for value in node]
    return node


def _json_path(locations: tuple[str, ...]) -> str | None:
    for location in locations:
        kind, _, arg = location.partition(":")
        if kind == "json":
            return arg
    return None


def _first_header(req: SignedRequest, locations: tuple[str, ...]) -> str | None:
    for location in locations:
        kind, _, arg = location.partition(":")
        if kind == "header" and req.headers.get(arg):
            return req.headers[arg]
    return None


def dumps(recipe: Any) -> str:
    """A recipe's canonical JSON (cache key for per-source recipes)."""
    return json.dumps(recipe, sort_keys=True, separators=(",", ":"))
