"""The admin API's bodies are checked by their schemas: a 400 naming each bad field."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from inbox.domain.errors import BadRequest
from web.api import bodies

app = Flask(__name__)


def _load(schema: type[Any], body: object, **kw: Any) -> dict[str, Any]:
    with app.test_request_context(json=body):
        return bodies.load(schema, **kw)


def test_a_hold_body_is_read_with_its_defaults() -> None:
    got = _load(bodies.Hold, {"tenant": "t", "reason": "case 7", "business_key": "k"})
    assert got == {
        "tenant": "t", "reason": "case 7", "source": None, "business_key": ["k"], "event": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ([], "The body must be a JSON object."),
        ({"tenant": "t", "reason": "r", "color": 1}, "Unknown field(s): color."),
        ({"reason": "r"}, "tenant is required (a string)."),
        ({"tenant": "t", "reason": 5}, "reason must be a string."),
        ({"tenant": "t", "reason": "r", "business_key": []}, "business_key must be a string"),
    ],
)
def test_a_bad_hold_body_is_a_400_that_names_the_field(body: object, said: str) -> None:
    with pytest.raises(BadRequest) as caught:
        _load(bodies.Hold, body)
    assert said in caught.value.message


def test_an_optional_body_may_be_absent() -> None:
    with app.test_request_context():
        assert bodies.load(bodies.Review, optional=True) == {"note": None}
    with pytest.raises(BadRequest, match="note must be a string"):
        _load(bodies.Review, {"note": 3}, optional=True)


def test_a_redaction_needs_its_reason() -> None:
    with pytest.raises(BadRequest, match="reason is required"):
        _load(bodies.Redact, {})
