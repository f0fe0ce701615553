"""The two-person rule for releasing a tenant-wide legal hold (pure)."""

from __future__ import annotations

import datetime as dt

import pytest

from inbox.domain.errors import Forbidden
from inbox.domain.holds import check_release
from inbox.domain.retention import DayContents, day_kept_because


@pytest.mark.parametrize("scope", ["source", "business_key", "event"])
def test_a_narrow_hold_is_released_by_one_operator(scope):
    assert check_release(scope, None, "alice") is True


def test_a_tenant_hold_is_asked_for_then_released_by_another():
    assert check_release("tenant", None, "alice") is False  # only asked
    assert check_release("tenant", "alice", "bob") is True
    with pytest.raises(Forbidden, match="different operator"):
        check_release("tenant", "alice", "alice")


def test_a_held_day_says_which_hold_keeps_it():
    today = dt.date(2026, 12, 3)
    old = today - dt.timedelta(days=400)
    held = DayContents(held_events=2, holds=("hold_a", "hold_b"))
    assert day_kept_because(old, today, 365, held) == "legal hold hold_a, hold_b (2 held event(s))"
    assert day_kept_because(old, today, 365, DayContents()) is None
