"""Per-source rate limits: one token bucket per source, shared through Redis.

Where the bucket lives: in Redis when ``REDIS_URL`` is set, so every web process on every
host draws from one bucket and the limit is the limit (a provider on one keep-alive
connection reaches one process; per-process buckets divided by the process count would
hold it to a fraction of its rate). One small script call per request, only for sources
that set a limit. When Redis fails or is slow (50 ms), the process falls back to a bucket
of its own for ``fallback_seconds``: the receiver never answers 5xx because of Redis, and a
limit still holds, per process, until Redis is back.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from inbox.domain.ratelimit import TokenBucket
from inbox.infra import redis_client

log = logging.getLogger(__name__)

# KEYS[1] the bucket; ARGV rate, burst. Redis's own clock, so hosts' clocks do not matter.
_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1]) or burst
local at = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return tostring(wait)
"""


class RateLimiter:
    def __init__(self, redis_url: str = "", fallback_seconds: float = 5.0) -> None:
        self._client: redis.Redis | None = None
        if redis_url:
            self._client = redis_client.client(
                redis_url, socket_timeout=0.05, socket_connect_timeout=0.05
            )
        self._script = self._client.register_script(_TAKE) if self._client else None
        self._fallback_seconds = fallback_seconds
        self._redis_down_until = 0.0
        self._lock = threading.Lock()
        self._local: dict[int, TokenBucket] = {}

    def take(self, source_id: int, rate: float, burst: int) -> float:
        """One request of a source: 0.0 to go ahead, else seconds until it may."""
        now = time.monotonic()
        if self._script is not None and now >= self._redis_down_until:
            try:
                return float(self._script(keys=[f"inbox:rate:{source_id}"], args=[rate, burst]))
            except (redis.RedisError, OSError, ValueError) as exc:
                self._redis_down_until = now + self._fallback_seconds
                log.warning(
                    "rate limit: Redis unavailable (%s), per-process buckets", type(exc).__name__
                )
        with self._lock:
            bucket = self._local.get(source_id)
            if bucket is None or bucket.rate != rate or bucket.burst != burst:
                bucket = self._local[source_id] = TokenBucket.full(rate, burst, now)
            return bucket.take(now)
