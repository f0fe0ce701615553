"""The admin API's JSON bodies, each a marshmallow schema checked in one place.

``load(Schema)`` is what a view calls: the body as a dict of checked values, or a 400
whose message names every field that is unknown, missing or of the wrong type (the
error's ``fields``), so nothing is stored from a body that does not fit.
"""

from __future__ import annotations

from typing import Any

from flask import request
from marshmallow import RAISE, Schema, ValidationError, fields, validate, validates_schema

from inbox.domain import fairness
from inbox.domain.errors import BadRequest
from inbox.services.endpoint_state import MAX_IN_FLIGHT, MAX_RATE

_TEXT: dict[str, str | list[Any] | dict[Any, Any]] = {"invalid": "must be a string"}
_REQUIRED: dict[str, str | list[Any] | dict[Any, Any]] = {
    "required": "is required (a string)",
    **_TEXT,
}


class _Body(Schema):
    class Meta:
        unknown = RAISE


class Redact(_Body):
    """``POST /events/<id>/redact``."""

    reason = fields.String(required=True, error_messages=_REQUIRED)


class Skip(_Body):
    """``POST /events/<id>/skip``: the reason is asked for by the use case."""

    reason = fields.String(load_default=None, allow_none=True, error_messages=_TEXT)


class Review(_Body):
    """``POST /replays/<id>/approve|reject``: an optional note."""

    note = fields.String(load_default=None, allow_none=True, error_messages=_TEXT)


class _BusinessKey(fields.Field[list[str]]):
    """A business key: one value, or a non-empty list of values (as a list)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return value
        raise ValidationError("must be a string or a non-empty list of strings")


class Hold(_Body):
    """``POST /holds``: a tenant and a reason, and at most one subject."""

    tenant = fields.String(
        required=True,
        validate=validate.Length(min=1, error="must not be empty"),
        error_messages=_REQUIRED,
    )
    reason = fields.String(required=True, error_messages=_REQUIRED)
    source = fields.String(load_default=None, allow_none=True, error_messages=_TEXT)
    business_key = _BusinessKey(load_default=None, allow_none=True)
    event = fields.String(load_default=None, allow_none=True, error_messages=_TEXT)


class _Number(fields.Field[float]):
    """A JSON number (not a string of digits, not true/false)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValidationError("must be a number or null")
        return float(value)


class _Flag(fields.Field[bool]):
    """JSON true or false (not "true", not 1)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> bool:
        if not isinstance(value, bool):
            raise ValidationError("must be true or false")
        return value


class _Whole(fields.Field[int]):
    """A JSON whole number (not 2.0, not a string of digits, not true/false)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError("must be a whole number")
        return value


class Fairness(_Body):
    """``PATCH /tenants/<name>``: either or both; a field left out keeps what is set, a
    null ``max_in_flight`` removes the cap."""

    max_in_flight = _Whole(
        allow_none=True,
        validate=validate.Range(
            min=1,
            max=fairness.MAX_IN_FLIGHT,
            error=f"must be a whole number from 1 to {fairness.MAX_IN_FLIGHT}, or null (no cap)",
        ),
    )
    weight = _Whole(
        validate=validate.Range(
            min=1,
            max=fairness.MAX_WEIGHT,
            error=f"must be a whole number from 1 to {fairness.MAX_WEIGHT}",
        ),
        error_messages={"null": f"must be a whole number from 1 to {fairness.MAX_WEIGHT}"},
    )

    @validates_schema
    def _either(self, data: dict[str, Any], **kwargs: Any) -> None:
        if not data:
            raise ValidationError("must name max_in_flight or weight (or both)", "body")


class Discard(_Body):
    """``POST /endpoints/<id>/discard``: why the held deliveries are discarded."""

    reason = fields.String(required=True, error_messages=_REQUIRED)


class Limits(_Body):
    """``POST /endpoints/<id>/limits``: either or both; a field left out (or a null
    ``max_in_flight``) keeps what is set, a null ``rate_per_second`` removes the rate."""

    rate_per_second = _Number(
        allow_none=True,
        validate=validate.Range(
            min=0, max=MAX_RATE, min_inclusive=False, error=f"must be above 0, at most {MAX_RATE:g}"
        ),
    )
    max_in_flight = fields.Integer(
        strict=True,
        allow_none=True,
        validate=validate.Range(
            min=1, max=MAX_IN_FLIGHT, error=f"must be a whole number from 1 to {MAX_IN_FLIGHT}"
        ),
        error_messages={"invalid": "must be a whole number"},
    )


class Order(_Body):
    """``POST /endpoints/<id>/order``."""

    ordered = _Flag(
        required=True,
        error_messages={"required": "is required (true or false)", "null": "must be true or false"},
    )


class Delete(_Body):
    """``DELETE /endpoints/<id>`` (a body or the same as query parameters): what becomes
    of what it holds, ``{"held": "discard", "reason": R}``, or nothing."""

    held = fields.String(load_default=None, allow_none=True, error_messages=_TEXT)
    reason = fields.String(load_default=None, allow_none=True, error_messages=_TEXT)


class Erase(_Body):
    """``POST /erasures``: a tenant and a reason, and a subject for one subject's payloads."""

    tenant = fields.String(
        required=True,
        validate=validate.Length(min=1, error="must not be empty"),
        error_messages=_REQUIRED,
    )
    reason = fields.String(required=True, error_messages=_REQUIRED)
    subject = fields.String(load_default=None, allow_none=True, error_messages=_TEXT)


def load(schema: type[Schema], *, optional: bool = False) -> dict[str, Any]:
    """The request's JSON body checked by ``schema``; ``optional``: no body reads as ``{}``."""
    body = request.get_json(silent=True)
    if body is None and optional:
        body = {}
    return check(schema, body)


def check(schema: type[Schema], body: object) -> dict[str, Any]:
    """``body`` (the request's, or its query parameters) checked by ``schema``."""
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    try:
        loaded: dict[str, Any] = schema().load(body)
    except ValidationError as exc:
        said: dict[str, Any] = exc.normalized_messages()  # type: ignore[no-untyped-call]
        raise BadRequest(_said(said), fields=said) from None
    return loaded


def _said(messages: dict[str, Any]) -> str:
    """One sentence: unknown fields first (as the API has always said them), then the rest."""
    unknown = sorted(k for k, v in messages.items() if v == ["Unknown field."])
    parts = [f"Unknown field(s): {', '.join(unknown)}."] if unknown else []
    for name, said in sorted(messages.items()):
        if name not in unknown:
            text = "; ".join(said) if isinstance(said, list) else str(said)
            parts.append(f"{name} {text}.")
    return " ".join(parts)
