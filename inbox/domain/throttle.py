"""An endpoint's rate limit, the pure part: a token bucket kept on the endpoint's row.

It refills at ``rate`` tokens a second up to one second's worth (at least one token); a
claim takes one token per delivery it leases, so every courier process together sends at
most about ``rate`` messages a second. The backlog waits; nothing is dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: float  # left, after the claim
    allowed: int  # deliveries this claim may lease
    wait: float | None  # seconds until the next token, when none is allowed now


def take(rate: float, tokens: float, elapsed: float | None, wanted: int) -> Bucket:
    """``tokens`` left ``elapsed`` seconds ago (None: never used, a full bucket)."""
    burst = max(1.0, rate)
    now = burst if elapsed is None else min(burst, tokens + rate * max(0.0, elapsed))
    allowed = min(wanted, math.floor(now))
    left = now - allowed
    wait = None if allowed else (1.0 - left) / rate
    return Bucket(left, allowed, wait)
