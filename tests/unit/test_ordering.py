"""Stale events, the pure part: reading the provider's time or version, and comparing."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from inbox.domain.errors import BadRequest
from inbox.domain.ordering import Position, parse_time, parse_version, position
from inbox.domain.sources import SourceOptions


@pytest.mark.parametrize(
    "raw",
    ["2026-11-30T17:30:00Z", "2026-11-30T18:30:00+01:00", "2026-11-30T17:30:00", 1796059800],
)
def test_times_in_iso_8601_or_epoch_seconds(raw) -> None:
    assert parse_time(raw) == datetime(2026, 11, 30, 17, 30, tzinfo=UTC)


def test_versions_compare_as_numbers_and_times_as_times() -> None:
    assert parse_version("10") > parse_version(9)
    assert Position(version=Decimal(10)).newer_than(Position(version=Decimal(9)))
    later, earlier = Position(parse_time("2026-12-01")), Position(parse_time("2026-11-30"))
    assert later.newer_than(earlier) and not earlier.newer_than(later)
    assert not later.newer_than(later)  # equal is not newer: a tie is not stale
    assert not later.newer_than(Position(version=Decimal(1)))  # different kinds never compare


def test_a_missing_value_is_no_position_and_a_bad_one_is_400() -> None:
    assert position({"a": 1}, occurred_at_path="at") is None
    assert position({"v": "7"}, version_path="v") == Position(version=Decimal(7))
    for doc, kw in (
        ({"at": "soon"}, {"occurred_at_path": "at"}),
        ({"at": True}, {"occurred_at_path": "at"}),
        ({"v": "seven"}, {"version_path": "v"}),
        ({"v": "NaN"}, {"version_path": "v"}),
    ):
        with pytest.raises(BadRequest):
            position(doc, **kw)


def test_source_options_name_one_order_and_need_a_business_key() -> None:
    ok = SourceOptions.from_dict({"occurred_at_path": "at", "business_key_paths": ["case"]})
    assert ok.occurred_at_path == "at" and ok.to_dict()["occurred_at_path"] == "at"
    for bad in (
        {"occurred_at_path": "at"},
        {"version_path": "v", "occurred_at_path": "at", "business_key_paths": ["case"]},
        {"version_path": "", "business_key_paths": ["case"]},
    ):
        with pytest.raises(BadRequest):
            SourceOptions.from_dict(bad)
