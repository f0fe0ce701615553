"""The token bucket (pure)."""

from __future__ import annotations

import pytest

from inbox.domain.ratelimit import TokenBucket, retry_after
from inbox.domain.sources import SourceOptions


def test_a_burst_then_the_rate():
    b = TokenBucket.full(rate=2.0, burst=3, now=0.0)
    assert [b.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take(0.0) == pytest.approx(0.5)
    assert b.take(0.5) == 0.0  # one token came back in half a second
    assert b.take(0.5) == pytest.approx(0.5)
    assert b.take(100.0) == 0.0 and b.tokens == pytest.approx(2.0)  # never more than burst


def test_retry_after_is_whole_seconds_at_least_one():
    assert retry_after(0.01) == 1 and retry_after(1.2) == 2


def test_the_options_and_their_default_burst():
    assert SourceOptions.from_dict({"rate_limit_per_second": 50}).burst == 50
    assert SourceOptions.from_dict({"rate_limit_per_second": 0.5}).burst == 1
    opts = SourceOptions.from_dict({"rate_limit_per_second": 5, "rate_limit_burst": 20})
    assert opts.burst == 20 and opts.to_dict() == {
        "rate_limit_per_second": 5,
        "rate_limit_burst": 20,
    }
