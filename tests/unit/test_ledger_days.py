"""The ledger's ids carry their day: the arithmetic partitions and lookups rely on."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inbox.domain import ledger

days = st.dates(min_value=dt.date(1970, 1, 1), max_value=dt.date(9999, 12, 31))
sequences = st.integers(min_value=0, max_value=ledger.SEQUENCE_MASK)


@given(days, sequences)
def test_an_id_lies_in_its_days_bounds_and_names_its_day(day, seq):
    row_id = ledger.make_id(day, seq)
    lower, upper = ledger.bounds(day)
    assert lower <= row_id < upper
    assert ledger.day_of(row_id) == day
    assert row_id < 2**63  # a bigint


@given(days)
def test_consecutive_days_meet_without_gap_or_overlap(day):
    if day == dt.date.max:
        return
    assert ledger.bounds(day)[1] == ledger.bounds(day + dt.timedelta(days=1))[0]


def test_a_sequence_past_the_day_is_refused():
    with pytest.raises(ValueError):
        ledger.make_id(dt.date(2026, 12, 1), ledger.SEQUENCE_MASK + 1)


def test_partition_names_round_trip_and_other_names_are_none():
    day = dt.date(2026, 12, 1)
    name = ledger.partition_name("events", day)
    assert name == "events_p20261201"
    assert ledger.day_of_partition("events", name) == day
    assert ledger.day_of_partition("events", "events_default") is None
    assert ledger.day_of_partition("events", "event_keys_p20261201") is None
    assert ledger.day_of_partition("events", "events_p20261341") is None
