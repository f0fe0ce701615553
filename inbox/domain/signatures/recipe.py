"""A recipe: an HMAC-style provider described as data, validated field by field.

The fields (docs/recipes.md is the reference, with a worked example):

- ``name``, ``summary``, ``docs``: what the scheme is called and what it checks;
- ``content_types`` (+ ``json_suffix``) and ``form_payload_field``: what bodies it takes;
- ``auth``: ``hmac`` (a signature over a template), ``token`` (a shared secret sent as
  is) or ``basic`` (HTTP Basic ``user:password``);
- ``signature``: where the signature (or token) is, as one location or a list of
  alternatives (``header:NAME``, ``json:PATH``, ``form:NAME``); ``signature_format`` when
  the value is a list of ``key=value`` items (``t=...,v1=...``), ``signature_prefix``;
- ``signed``: the template of the signed bytes (``{timestamp}.{body}``), ``algorithm``,
  ``encoding``, ``secret_prefix``, ``secret_encoding``;
- ``timestamp``: ``{"from": LOCATION, "unit": "s"|"ms"|"rfc3339", "tolerance": N,
  "future": true}``;
- ``event_id`` / ``event_type``: lists of locations, headers first, at most one JSON path;
- ``handshake``: rules answering a provider's verification request instead of storing it;
- ``accept_status`` (200, 202 or 204, with ``accept_docs`` saying where the provider asks
  for it), ``restamped`` (JSON paths the provider changes between retries) and
  ``body_identity`` (key a delivery without an id by the digest of its body).

``parse_recipe`` raises ``RecipeError`` naming the first bad field and what it expected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .base import ACCEPT_STATUSES
from .template import TOKEN_NAMES, RecipeError, parse_location, parse_template

ALGORITHMS = ("sha1", "sha256", "sha512")
ENCODINGS = ("hex", "base64", "base64url")
SECRET_ENCODINGS = ("utf8", "base64", "hex")
AUTH_KINDS = ("hmac", "token", "basic")
UNITS = ("s", "ms", "rfc3339")
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
_MEDIA = re.compile(r"[a-z0-9.+-]+/[a-z0-9.+-]+")
_LOCATION_KINDS = ("header", "json", "form", "query")


@dataclass(frozen=True)
class SignatureFormat:
    """A signature header made of items: ``t=1,v1=ab`` or ``v1,ab v1,cd``."""

    separator: str
    assign: str
    keys: tuple[str, ...]
    timestamp_key: str | None = None


@dataclass(frozen=True)
class Timestamp:
    source: str  # a location, or ``signature:KEY``
    unit: str = "s"
    tolerance: int = 300
    future: bool = True  # also refuse timestamps too far ahead


@dataclass(frozen=True)
class HandshakeRule:
    """Answer a verification request: ``when`` all locations hold their values (None:
    present), reply ``status`` with ``json`` (a template tree) or ``text``, or nothing."""

    method: str
    when: tuple[tuple[str, str | None], ...]
    status: int
    json: Any = None
    text: str | None = None
    check: str = "signature"  # signature | none | a location that must equal a secret


@dataclass(frozen=True)
class Recipe:
    name: str
    summary: str
    auth: str = "hmac"
    docs: str | None = None
    content_types: tuple[str, ...] = ("application/json",)
    json_suffix: bool = False
    form_payload_field: str | None = None
    signature: tuple[str, ...] = ()
    signature_format: SignatureFormat | None = None
    signature_prefix: str = ""
    signed: str = "{body}"
    algorithm: str = "sha256"
    encoding: str = "hex"
    secret_prefix: str = ""
    secret_encoding: str = "utf8"
    timestamp: Timestamp | None = None
    event_id: tuple[str, ...] = ()
    event_type: tuple[str, ...] = ()
    handshake: tuple[HandshakeRule, ...] = ()
    accept_status: int = 202
    accept_docs: str | None = None  # where the provider documents the answer it counts
    restamped: tuple[str, ...] = ()  # JSON paths a provider changes on every attempt
    body_identity: bool = False  # id-less deliveries are keyed by their body's digest
    notes: str | None = None


_TOP = {
    "name", "summary", "docs", "notes", "auth", "content_types", "json_suffix",
    "form_payload_field", "signature", "signature_format", "signature_prefix", "signed",
    "algorithm", "encoding", "secret_prefix", "secret_encoding", "timestamp", "event_id",
    "event_type", "handshake", "accept_status", "accept_docs", "restamped", "body_identity",
}  # fmt: skip


def _str(raw: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str):
        raise RecipeError(key, "must be a string" if key in raw else "is required")
    return value


def _choice(raw: Mapping[str, Any], key: str, choices: tuple[str, ...], default: str) -> str:
    value = _str(raw, key, default)
    if value not in choices:
        raise RecipeError(key, f"must be one of {', '.join(choices)} (got {value!r})")
    return value


def _locations(raw: Any, key: str, kinds: tuple[str, ...] = _LOCATION_KINDS) -> tuple[str, ...]:
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise RecipeError(key, "must be a location string or a list of them")
    for i, item in enumerate(items):
        parse_location(item, f"{key}[{i}]", kinds)
    return tuple(item if not item.startswith("header:") else item.lower() for item in items)


def _ids(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    out = _locations(raw.get(key, []), key, ("header", "json"))
    kinds = [loc.partition(":")[0] for loc in out]
    if kinds.count("json") > 1 or ("json" in kinds and kinds[-1] != "json"):
        raise RecipeError(key, "lists headers first, then at most one json: path")
    return out


def _format(raw: Any) -> SignatureFormat | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RecipeError("signature_format", "must be an object")
    unknown = set(raw) - {"separator", "assign", "keys", "timestamp_key"}
    if unknown:
        raise RecipeError(f"signature_format.{sorted(unknown)[0]}", "is not a known field")
    sep, assign = raw.get("separator", ","), raw.get("assign", "=")
    for key, value in (("separator", sep), ("assign", assign)):
        if not isinstance(value, str) or len(value) != 1:
            raise RecipeError(f"signature_format.{key}", "must be one character")
    keys = raw.get("keys")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise RecipeError("signature_format.keys", "must be a non-empty list of item keys")
    ts_key = raw.get("timestamp_key")
    if ts_key is not None and not isinstance(ts_key, str):
        raise RecipeError("signature_format.timestamp_key", "must be a string")
    return SignatureFormat(sep, assign, tuple(keys), ts_key)


def _timestamp(raw: Any, fmt: SignatureFormat | None) -> Timestamp | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RecipeError("timestamp", "must be an object")
    unknown = set(raw) - {"from", "unit", "tolerance", "future"}
    if unknown:
        raise RecipeError(f"timestamp.{sorted(unknown)[0]}", "is not a known field")
    source = raw.get("from")
    if not isinstance(source, str):
        raise RecipeError("timestamp.from", "is required (header:NAME, json:PATH, signature:KEY)")
    if source.startswith("signature:"):
        if fmt is None or fmt.timestamp_key != source.partition(":")[2]:
            raise RecipeError("timestamp.from", "names a key that signature_format lacks")
    else:
        source = _locations(source, "timestamp.from")[0]
    unit = _choice(raw, "unit", UNITS, "s") if "unit" in raw else "s"
    tolerance = raw.get("tolerance", 300)
    if not isinstance(tolerance, int) or isinstance(tolerance, bool) or not 1 <= tolerance:
        raise RecipeError("timestamp.tolerance", "must be a positive number of seconds")
    future = raw.get("future", True)
    if not isinstance(future, bool):
        raise RecipeError("timestamp.future", "must be true or false")
    return Timestamp(source, unit, tolerance, future)


def _handshake(raw: Any, i: int) -> HandshakeRule:
    where = f"handshake[{i}]"
    if not isinstance(raw, dict):
        raise RecipeError(where, "must be an object")
    unknown = set(raw) - {"method", "when", "status", "json", "text", "check"}
    if unknown:
        raise RecipeError(f"{where}.{sorted(unknown)[0]}", "is not a known field")
    method = raw.get("method", "POST")
    if method not in ("POST", "GET"):
        raise RecipeError(f"{where}.method", "must be POST or GET")
    when = raw.get("when")
    if not isinstance(when, dict) or not when:
        raise RecipeError(f"{where}.when", "must map locations to values (null: present)")
    conds = []
    for loc, value in when.items():
        _locations(loc, f"{where}.when")
        if value is not None and not isinstance(value, (str, int)):
            raise RecipeError(f"{where}.when.{loc}", "must be a string, a number or null")
        conds.append((loc, None if value is None else str(value)))
    status = raw.get("status", 200)
    if not isinstance(status, int) or not 200 <= status <= 299:
        raise RecipeError(f"{where}.status", "must be a 2xx status")
    _check_reply(raw, where)
    check = raw.get("check", "signature")
    if check not in ("signature", "none"):
        _locations(check, f"{where}.check")
    if method == "POST" and check != "signature":
        raise RecipeError(f"{where}.check", "a POST handshake is always checked by signature")
    return HandshakeRule(method, tuple(conds), status, raw.get("json"), raw.get("text"), check)


def _check_reply(raw: dict[str, Any], where: str) -> None:
    if "json" in raw and "text" in raw:
        raise RecipeError(f"{where}.text", "cannot be given with json")
    _check_answer(raw.get("json"), f"{where}.json")
    text = raw.get("text")
    if text is not None:
        if not isinstance(text, str):
            raise RecipeError(f"{where}.text", "must be a string template")
        parse_template(text, f"{where}.text", answer=True)


def _check_answer(node: Any, where: str) -> None:
    if isinstance(node, str):
        parse_template(node, where, answer=True)
    elif isinstance(node, dict):
        for key, value in node.items():
            _check_answer(value, f"{where}.{key}")
    elif isinstance(node, list):
        for j, value in enumerate(node):
            _check_answer(value, f"{where}[{j}]")


def _paths(raw: Any, key: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(p, str) and p for p in raw):
        raise RecipeError(key, "must be a list of dotted JSON paths")
    return tuple(raw)


def _misc(raw: dict[str, Any]) -> tuple[str | None, int]:
    if not isinstance(raw.get("json_suffix", False), bool):
        raise RecipeError("json_suffix", "must be true or false")
    for key in ("docs", "notes", "accept_docs"):
        if not isinstance(raw.get(key, ""), str):
            raise RecipeError(key, "must be a string")
    field_name = raw.get("form_payload_field")
    if field_name is not None and not isinstance(field_name, str):
        raise RecipeError("form_payload_field", "must be a form field name")
    accept = raw.get("accept_status", 202)
    if accept not in ACCEPT_STATUSES or isinstance(accept, bool):
        raise RecipeError("accept_status", "must be 200, 202 or 204")
    if not isinstance(raw.get("body_identity", False), bool):
        raise RecipeError("body_identity", "must be true or false")
    return field_name, accept


def parse_recipe(raw: Any) -> Recipe:
    """Validate ``raw`` (decoded JSON) into a Recipe; RecipeError names the bad field."""
    if not isinstance(raw, dict):
        raise RecipeError("recipe", "must be a JSON object")
    unknown = set(raw) - _TOP
    if unknown:
        raise RecipeError(sorted(unknown)[0], "is not a known recipe field")
    name = _str(raw, "name")
    if not _NAME.fullmatch(name):
        raise RecipeError("name", "must be lower-case letters, digits, - or _ (max 40)")
    auth = _choice(raw, "auth", AUTH_KINDS, "hmac")
    ctypes = raw.get("content_types", ["application/json"])
    if not isinstance(ctypes, list) or not ctypes:
        raise RecipeError("content_types", "must be a non-empty list of media types")
    for ctype in ctypes:
        if not isinstance(ctype, str) or not _MEDIA.fullmatch(ctype):
            raise RecipeError("content_types", f"{ctype!r} is not a lower-case media type")
    if "signature" not in raw and auth != "basic":
        raise RecipeError("signature", "is required (e.g. header:x-signature)")
    signature = _locations(raw.get("signature", []), "signature", ("header", "json", "form"))
    fmt = _format(raw.get("signature_format"))
    signed = _str(raw, "signed", "{body}")
    parse_template(signed, "signed")
    timestamp = _timestamp(raw.get("timestamp"), fmt)
    if "{timestamp}" in signed and timestamp is None:
        raise RecipeError("signed", "uses {timestamp} but the recipe has no timestamp")
    rules = raw.get("handshake", [])
    if not isinstance(rules, list):
        raise RecipeError("handshake", "must be a list of rules")
    field_name, accept = _misc(raw)
    return Recipe(
        name=name,
        summary=_str(raw, "summary", f"{auth} recipe {name}"),
        auth=auth,
        docs=raw.get("docs"),
        notes=raw.get("notes"),
        content_types=tuple(ctypes),
        json_suffix=raw.get("json_suffix", False),
        form_payload_field=field_name,
        signature=signature,
        signature_format=fmt,
        signature_prefix=_str(raw, "signature_prefix", ""),
        signed=signed,
        algorithm=_choice(raw, "algorithm", ALGORITHMS, "sha256"),
        encoding=_choice(raw, "encoding", ENCODINGS, "hex"),
        secret_prefix=_str(raw, "secret_prefix", ""),
        secret_encoding=_choice(raw, "secret_encoding", SECRET_ENCODINGS, "utf8"),
        timestamp=timestamp,
        event_id=_ids(raw, "event_id"),
        event_type=_ids(raw, "event_type"),
        handshake=tuple(_handshake(rule, i) for i, rule in enumerate(rules)),
        accept_status=accept,
        accept_docs=raw.get("accept_docs"),
        restamped=_paths(raw.get("restamped", []), "restamped"),
        body_identity=raw.get("body_identity", False),
    )


__all__ = ["TOKEN_NAMES", "HandshakeRule", "Recipe", "RecipeError", "parse_recipe"]
