"""The CEL filters' pure rules: compile once, refuse bad expressions in one line, verdicts."""

from __future__ import annotations

import pytest

from inbox.domain import filters
from inbox.domain.errors import BadRequest
from inbox.domain.sources import SourceOptions


def test_a_program_is_compiled_once_per_expression() -> None:
    expr = "body.n == 7 && true"
    assert filters.program(expr) is filters.program(expr)


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("body.n ==", "Syntax error"),
        ("body.n == 'x", "Syntax error"),
        ("payload.n == 1", "unknown variable payload"),
        ("   ", "empty"),
        ("body.n == 1 || " * 400 + "true", "longer than"),
    ],
)
def test_an_invalid_source_filter_is_refused_in_one_line(expr: str, says: str) -> None:
    with pytest.raises(BadRequest) as info:
        SourceOptions.from_dict({"filter": expr})
    assert says in str(info.value)
    assert "\n" not in str(info.value)


def test_a_stored_filter_loads_unchecked() -> None:
    assert SourceOptions.from_dict({"filter": "nope ==="}, check_schema=False).filter


@pytest.mark.parametrize(
    ("expr", "body", "headers", "reason"),
    [
        ("body.n > 1", {"n": 2}, {}, None),
        ("body.n > 1", {"n": 1}, {}, "filter is false: body.n > 1"),
        ("has(body.n)", {}, {}, "filter is false: has(body.n)"),
        ("body.n", {"n": 3}, {}, "filter returned int, not a bool: body.n"),
        (
            "body.m == 1",
            {"n": 3},
            {},
            "filter could not be evaluated (no such key 'm'): body.m == 1",
        ),
        ("headers['x-env'] == 'prod'", {}, {"X-Env": "prod"}, None),
        ("body.items.exists(i, i.sku == 'a')", {"items": [{"sku": "a"}]}, {}, None),
    ],
)
def test_the_source_verdict(
    expr: str, body: object, headers: dict[str, str], reason: str | None
) -> None:
    assert filters.source_reason(expr, body, headers) == reason


def test_the_endpoint_verdict() -> None:
    expr = "type.startsWith('case.') && payload.priority >= 2"
    assert filters.endpoint_matches(expr, "case.opened", {"priority": 2})
    assert not filters.endpoint_matches(expr, "case.opened", {"priority": 1})
    assert not filters.endpoint_matches(expr, "invoice.paid", {"priority": 9})
    assert not filters.endpoint_matches(expr, "case.opened", {})  # no such key: not sent


def test_an_endpoint_filter_sees_type_and_payload_only() -> None:
    filters.check("type == 'a' && payload.x == 1", filters.ENDPOINT_VARIABLES, "endpoint filter")
    with pytest.raises(BadRequest, match="unknown variable body"):
        filters.check("body.x == 1", filters.ENDPOINT_VARIABLES, "endpoint filter")
