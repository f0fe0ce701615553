"""A source's body schema: a small field spec checked with marshmallow.

The spec maps a top-level field to a type, ``?`` marking it optional:
``{"id": "str", "amount": "int", "note": "str?"}``. A body that does not
satisfy it fails permanently: no retry can fix a malformed event.
"""

from __future__ import annotations

import json
from typing import Any

from marshmallow import INCLUDE, Schema, ValidationError, fields

from inbox.domain.errors import PermanentError

_TYPES: dict[str, type[fields.Field[Any]]] = {
    "str": fields.String,
    "int": fields.Integer,
    "float": fields.Float,
    "bool": fields.Boolean,
    "dict": fields.Dict,
    "list": fields.List,
    "any": fields.Raw,
}


def _field(spec: str) -> fields.Field[Any]:
    optional = spec.endswith("?")
    kind = _TYPES.get(spec.rstrip("?"))
    if kind is None:
        raise PermanentError(f"Unknown type {spec!r} in the source's body schema.")
    kwargs: dict[str, Any] = {"required": not optional, "allow_none": optional}
    if kind is fields.List:
        return fields.List(fields.Raw(), **kwargs)
    if kind in (fields.Integer, fields.Float, fields.Boolean):
        kwargs["strict"] = True
    return kind(**kwargs)


def spec_errors(spec: dict[str, str]) -> dict[str, str]:
    """What is wrong with a body schema spec, by field; empty when it is valid.

    Checked when a source is created or updated, so a typo is refused at once instead of
    quarantining every event that arrives.
    """
    known = ", ".join(sorted(_TYPES))
    return {
        name: f"unknown type {kind!r} (known: {known}, '?' for optional)"
        for name, kind in spec.items()
        if not isinstance(kind, str) or kind.rstrip("?") not in _TYPES
    }


def check_body(spec: dict[str, str], body: bytes, content_type: str) -> None:
    if not spec or not content_type.endswith("json"):
        return
    schema = Schema.from_dict({name: _field(t) for name, t in spec.items()})(unknown=INCLUDE)
    try:
        schema.load(json.loads(body))
    except (ValueError, ValidationError) as exc:
        messages = exc.messages if isinstance(exc, ValidationError) else str(exc)
        raise PermanentError(f"The body does not match the source's schema: {messages}") from exc
