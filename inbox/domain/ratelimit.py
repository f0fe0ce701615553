"""A token bucket, pure: ``rate`` tokens a second, at most ``burst`` saved up."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class TokenBucket:
    rate: float
    burst: float
    tokens: float
    updated: float

    @classmethod
    def full(cls, rate: float, burst: float, now: float) -> TokenBucket:
        return cls(rate, burst, burst, now)

    def take(self, now: float) -> float:
        """Take one token: 0.0 if there was one, else the seconds until there is one."""
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


def retry_after(wait_seconds: float) -> int:
    """A Retry-After value (whole seconds, at least 1) for a wait."""
    return max(1, math.ceil(wait_seconds))
