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


# -- the endpoints API ---------------------------------------------------------------------


def test_limits_keep_what_the_body_leaves_out() -> None:
    assert _load(bodies.Limits, {"max_in_flight": 4}) == {"max_in_flight": 4}
    assert _load(bodies.Limits, {"rate_per_second": None}) == {"rate_per_second": None}
    assert _load(bodies.Limits, {"rate_per_second": 2}) == {"rate_per_second": 2.0}


def test_bad_limits_name_every_bad_field() -> None:
    with pytest.raises(BadRequest) as caught:
        _load(bodies.Limits, {"rate_per_second": "5", "max_in_flight": 1.5, "burst": 3})
    said = caught.value.message
    assert "Unknown field(s): burst." in said
    assert "rate_per_second must be a number or null." in said
    assert "max_in_flight must be a whole number." in said
    assert set(caught.value.extra["fields"]) == {"rate_per_second", "max_in_flight", "burst"}


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"rate_per_second": True}, "rate_per_second must be a number or null."),
        ({"rate_per_second": 0}, "rate_per_second must be above 0"),
        ({"max_in_flight": True}, "max_in_flight must be a whole number."),
        ({"max_in_flight": 0}, "max_in_flight must be a whole number from 1 to"),
    ],
)
def test_a_limit_of_the_wrong_kind_or_out_of_range_is_named(body: object, said: str) -> None:
    with pytest.raises(BadRequest, match=said):
        _load(bodies.Limits, body)


@pytest.mark.parametrize("ordered", ["true", 1, None])
def test_ordered_is_only_true_or_false(ordered: object) -> None:
    with pytest.raises(BadRequest, match="ordered must be true or false"):
        _load(bodies.Order, {"ordered": ordered})
    assert _load(bodies.Order, {"ordered": False}) == {"ordered": False}


def test_order_and_discard_name_what_is_missing() -> None:
    with pytest.raises(BadRequest, match=r"ordered is required \(true or false\)"):
        _load(bodies.Order, {})
    with pytest.raises(BadRequest, match=r"reason is required \(a string\)"):
        _load(bodies.Discard, {})


def test_a_delete_reads_its_query_parameters_like_a_body() -> None:
    assert bodies.check(bodies.Delete, {}) == {"held": None, "reason": None}
    got = bodies.check(bodies.Delete, {"held": "discard", "reason": "gone"})
    assert got == {"held": "discard", "reason": "gone"}
    with pytest.raises(BadRequest) as caught:
        bodies.check(bodies.Delete, {"held": 1, "reason": [], "force": True})
    assert set(caught.value.extra["fields"]) == {"held", "reason", "force"}


# -- the erasures API ----------------------------------------------------------------------


def test_an_erasure_names_every_bad_field() -> None:
    with pytest.raises(BadRequest) as caught:
        _load(bodies.Erase, {"tenant": "", "subject": 7})
    said = caught.value.message
    assert "tenant must not be empty." in said
    assert "reason is required (a string)." in said
    assert "subject must be a string." in said
    got = _load(bodies.Erase, {"tenant": "t", "reason": "asked"})
    assert got == {"tenant": "t", "reason": "asked", "subject": None}
