"""Locations (``header:NAME``, ``json:PATH``, ``form:NAME``, ``query:NAME``) and the
templates built from them (``v0:{timestamp}:{body}``), for recipes.

A template is literal text with ``{token}`` parts. Tokens: ``{body}`` (the raw bytes),
``{url}`` (the URL the provider called: the request URL under ``public_url``),
``{method}``, ``{timestamp}`` (the timestamp text as received), ``{header:NAME}``,
``{json:PATH}``, ``{form:NAME}``, ``{query:NAME}``; in handshake answers also
``{hmac_hex:LOCATION}`` (the recipe's HMAC, keyed by the secret that verified the request,
of the value at LOCATION, in hex). ``{{`` and ``}}`` are literal braces.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from inbox.domain import jsonpath
from inbox.domain.errors import InboxError

from .base import SignatureError, SignedRequest

TOKEN_NAMES = ("body", "url", "method", "timestamp", "header", "json", "form", "query")
_PLAIN = {"body", "url", "method", "timestamp"}


class RecipeError(InboxError, ValueError):
    """A recipe is invalid: ``field`` names the bad field, ``message`` says what it expects."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def parse_location(text: str, where: str, kinds: tuple[str, ...]) -> tuple[str, str]:
    kind, sep, arg = text.partition(":")
    if not sep or kind not in kinds or not arg:
        raise RecipeError(
            where, f"{text!r} is not a location ({' | '.join(k + ':…' for k in kinds)})"
        )
    return kind, arg.lower() if kind == "header" else arg


Part = str | tuple[str, str]


def parse_template(text: str, where: str, *, answer: bool = False) -> tuple[Part, ...]:
    """Split ``text`` into literal strings and (name, argument) tokens."""
    parts: list[Part] = []
    literal, i = "", 0
    while i < len(text):
        ch = text[i]
        if text.startswith("{{", i) or text.startswith("}}", i):
            literal, i = literal + ch, i + 2
            continue
        if ch == "}":
            raise RecipeError(where, "has a } without a {")
        if ch != "{":
            literal, i = literal + ch, i + 1
            continue
        end = text.find("}", i)
        if end < 0:
            raise RecipeError(where, "has a { without a }")
        token = text[i + 1 : end]
        name, _, arg = token.partition(":")
        if name == "hmac_hex" and answer:
            parse_location(arg, where, ("header", "json", "query", "form"))
        elif name in _PLAIN and not arg:
            pass
        elif name in ("header", "json", "form", "query") and arg:
            arg = arg.lower() if name == "header" else arg
        else:
            raise RecipeError(where, f"{{{token}}} is not a known token")
        if literal:
            parts.append(literal)
            literal = ""
        parts.append((name, arg))
        i = end + 1
    if literal:
        parts.append(literal)
    return tuple(parts)


@dataclass
class Context:
    """What a template may read from one request."""

    req: SignedRequest
    url: str = ""
    timestamp: str = ""
    secret_key: bytes | None = None
    digest: Callable[[], Any] = hashlib.sha256
    _json: Any = None
    _parsed: bool = False

    def parsed_json(self) -> Any:
        if not self._parsed:
            self._parsed = True
            try:
                self._json = json.loads(self.req.body)
            except (ValueError, UnicodeDecodeError):
                self._json = None
        return self._json

    def lookup(self, kind: str, arg: str) -> str | None:
        """The text at a location, or None when it is absent."""
        if kind == "header":
            return self.req.headers.get(arg)
        if kind == "json":
            return jsonpath.get_text(self.parsed_json(), arg)
        if kind == "form":
            values = self.req.form.get(arg)
            return values[0] if values and len(values) == 1 else None
        if kind == "query":
            values = parse_qs(urlsplit(self.req.url).query, keep_blank_values=True).get(arg)
            return values[0] if values and len(values) == 1 else None
        raise SignatureError(f"unknown location kind {kind}")

    def render(self, parts: tuple[Part, ...]) -> bytes:
        out: list[bytes] = []
        for part in parts:
            if isinstance(part, str):
                out.append(part.encode("utf-8"))
                continue
            name, arg = part
            if name == "body":
                out.append(self.req.body)
            elif name == "hmac_hex":
                out.append(self._hmac_hex(arg).encode("ascii"))
            else:
                out.append(self._text(name, arg).encode("utf-8"))
        return b"".join(out)

    def _text(self, name: str, arg: str) -> str:
        if name == "url":
            return self.url
        if name == "method":
            return self.req.method
        if name == "timestamp":
            return self.timestamp
        value = self.lookup(name, arg)
        if value is None:
            raise SignatureError(f"the signed template needs {name}:{arg}, which is missing")
        return value

    def _hmac_hex(self, location: str) -> str:
        kind, _, arg = location.partition(":")
        value = self._text(kind, arg.lower() if kind == "header" else arg)
        if self.secret_key is None:
            raise SignatureError("no verified secret to answer with")
        return hmac.new(self.secret_key, value.encode(), self.digest).hexdigest()
