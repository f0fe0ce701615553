"""The retention policy: retry horizons, the shortest key window per scheme, refusals."""

from __future__ import annotations

import pytest

from inbox.domain.errors import BadRequest
from inbox.domain.retention import (
    RETRY_HORIZON_HOURS,
    UNKNOWN_HORIZON_HOURS,
    check_key_window,
    key_window_hours,
    key_window_problem,
    min_key_window_hours,
    retry_horizon_hours,
)
from inbox.domain.signatures import SCHEMES

# (scheme, the shortest accepted window in whole hours)
MINIMUMS = [
    ("stripe", 72),
    ("github", 1),
    ("shopify", 4),
    ("standard", 28),
    ("slack", 1),
    ("twilio", 1),
    ("paddle", 72),
    ("coinbase-commerce", 72),
    ("meta", 36),
    ("clerk", 28),
    ("resend", 28),
    ("token", 24),
    ("hmac", 24),
    ("none", 24),
]


def test_every_scheme_has_a_horizon_or_the_unknown_default() -> None:
    assert {s for s, _ in MINIMUMS} <= set(SCHEMES)
    # The providers added by #16 have no researched retry horizon yet: the default applies.
    for scheme in set(SCHEMES) - {s for s, _ in MINIMUMS}:
        assert retry_horizon_hours(scheme) == UNKNOWN_HORIZON_HOURS
    for scheme in ("token", "hmac", "none"):
        assert scheme not in RETRY_HORIZON_HOURS
        assert retry_horizon_hours(scheme) == UNKNOWN_HORIZON_HOURS == 24


def test_standard_webhooks_schedule_spans_about_27_and_a_half_hours() -> None:
    assert 27.5 < retry_horizon_hours("standard") < 27.7


@pytest.mark.parametrize(("scheme", "minimum"), MINIMUMS)
def test_the_minimum_window_is_accepted_and_one_hour_less_refused(
    scheme: str, minimum: int
) -> None:
    assert min_key_window_hours(scheme) == minimum
    check_key_window(scheme, minimum)
    check_key_window(scheme, minimum + 100)
    assert key_window_problem(scheme, minimum) is None
    if minimum > 1:
        with pytest.raises(BadRequest) as exc:
            check_key_window(scheme, minimum - 1)
        assert scheme in exc.value.message and f"{minimum} h" in exc.value.message
        assert exc.value.extra == {"minimum_key_ttl_hours": minimum}
        assert exc.value.http_status == 400


def test_the_default_24_hour_window_is_too_short_for_the_long_retrying_providers_only() -> None:
    refused = {s for s, _ in MINIMUMS if key_window_problem(s, 24) is not None}
    assert refused == {
        "stripe",
        "standard",
        "paddle",
        "coinbase-commerce",
        "meta",
        "clerk",
        "resend",
    }


def test_an_unknown_scheme_gets_the_unknown_horizon() -> None:
    assert min_key_window_hours("carrier-pigeon") == 24
    with pytest.raises(BadRequest):
        check_key_window("carrier-pigeon", 23)


def test_a_sources_own_window_wins_over_the_global_one() -> None:
    assert key_window_hours("hmac", None, 24) == 24
    assert key_window_hours("github", 72, 24) == 72
    assert key_window_hours("github", 1, 24) == 1


def test_the_global_window_stretches_to_cover_the_schemes_retries() -> None:
    assert key_window_hours("stripe", None, 24) == 72
    assert key_window_hours("standard", None, 24) == 28
    assert key_window_hours("stripe", None, 100) == 100
