"""An endpoint's rate limit (inbox.domain.throttle), without a database."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inbox.domain.throttle import take


def test_a_fresh_bucket_holds_one_seconds_worth_then_refills_at_the_rate() -> None:
    first = take(10.0, 0.0, None, 50)
    assert (first.allowed, first.tokens, first.wait) == (10, 0.0, None)
    empty = take(10.0, first.tokens, 0.0, 50)
    assert empty.allowed == 0 and empty.wait == 0.1
    later = take(10.0, first.tokens, 0.35, 50)
    assert later.allowed == 3 and round(later.tokens, 6) == 0.5


def test_a_slow_rate_lets_one_through_then_waits() -> None:
    one = take(0.5, 0.0, None, 50)
    assert one.allowed == 1
    assert take(0.5, one.tokens, 1.0, 50).wait == 1.0  # half a token: one more second


@given(
    st.floats(0.1, 1000.0),
    st.lists(st.tuples(st.floats(0.0, 3.0), st.integers(1, 60)), min_size=1, max_size=30),
)
def test_never_more_than_a_burst_plus_the_rate_over_time(rate: float, claims) -> None:
    tokens, elapsed, total, clock = 0.0, None, 0, 0.0
    for gap, wanted in claims:
        b = take(rate, tokens, elapsed, wanted)
        assert 0 <= b.allowed <= wanted and b.tokens >= 0
        total += b.allowed
        tokens, elapsed = b.tokens, gap
        clock += gap
    assert total <= max(1.0, rate) + rate * (clock - claims[-1][0]) + 1e-6
