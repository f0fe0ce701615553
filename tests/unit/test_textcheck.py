"""The JSON depth scanner and the text checks (pure)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inbox.domain.errors import BadRequest
from inbox.domain.textcheck import check_json_strings, check_text, json_too_deep, text_problem


def depth_of(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab'),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=30,
)


@given(json_values, st.integers(min_value=0, max_value=8))
def test_the_scanner_agrees_with_the_parsed_depth(value, limit):
    body = json.dumps(value).encode()
    assert json_too_deep(body, limit) == (depth_of(value) > limit)


def test_the_limit_is_inclusive_and_strings_do_not_count():
    assert not json_too_deep(b"[" * 256 + b"]" * 256)
    assert json_too_deep(b"[" * 257 + b"]" * 257)
    assert not json_too_deep(json.dumps(["[" * 5000, '\\"{' * 300]).encode())
    assert json_too_deep(b"[" * 1_000_000)  # no recursion, however deep


@pytest.mark.parametrize("bad", ["a\x00b", "\ud800", "x\udfffy"])
def test_nul_and_lone_surrogates_are_refused(bad):
    assert text_problem(bad) is not None
    with pytest.raises(BadRequest):
        check_text(bad, "The value")
    with pytest.raises(BadRequest):
        check_json_strings({"k": [1, {"x": bad}]})
    with pytest.raises(BadRequest):
        check_json_strings({bad: 1})


def test_good_text_passes_and_length_is_bounded():
    assert check_text("ünïcode ✓", "v") == "ünïcode ✓"
    check_json_strings({"a": ["b", 1, None, {"c": "d"}]})
    with pytest.raises(BadRequest):
        check_text("x" * 11, "v", max_length=10)


@pytest.mark.parametrize("joined", ["a,b", "a, b", "key-1,key-1"])
def test_a_key_holding_a_comma_is_refused(joined):
    """Two Idempotency-Key headers reach a WSGI app joined by a comma."""
    from inbox.domain.idempotency import validate_key

    with pytest.raises(BadRequest, match="more than once"):
        validate_key(joined)
    assert validate_key("a-b_c.d:e") == "a-b_c.d:e"
