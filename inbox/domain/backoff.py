"""Retry delays: exponential backoff with jitter, capped."""

from __future__ import annotations

import random


def retry_delay(
    attempt: int,
    base: float = 2.0,
    cap: float = 3600.0,
    rand: random.Random | None = None,
) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based).

    "Equal jitter": half the exponential delay is fixed, half is random, so retries
    of many events failing together spread out but none retries immediately.
    """
    exp: float = min(cap, base * 2.0 ** max(0, attempt - 1))
    r: float = (rand or random).random()
    return exp / 2 + r * exp / 2
