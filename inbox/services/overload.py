"""The receiver's two refusals under load, both before the claim and storing nothing.

- A source's rate limit (options ``rate_limit_per_second``, ``rate_limit_burst``): past
  it, 429 with Retry-After. Checked after the signature, so a stranger's flood cannot use
  up the provider's allowance. The bucket: ``inbox/infra/ratelimit.py``.
- The inbox's backlog (``INBOX_MAX_BACKLOG`` events received or processing, 0 = off): past
  it, new deliveries get 503 with Retry-After, so a stalled pipeline makes providers hold
  their events instead of the table growing without bound. The count is cached for
  ``BACKLOG_SECONDS`` and refreshed by one request at a time (the others use the cached
  value), never a count per request. If the count cannot be read the guard lets events in:
  the claim itself answers 503 when the database is really down.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import Engine

from inbox.domain.errors import TooManyRequests, Unavailable
from inbox.domain.ratelimit import retry_after
from inbox.domain.records import Source
from inbox.infra.ratelimit import RateLimiter
from inbox.store.reads.backlog import pending_count

log = logging.getLogger(__name__)

BACKLOG_SECONDS = 2.0


class Backlog:
    def __init__(self, engine: Engine, limit: int, ttl: float = BACKLOG_SECONDS) -> None:
        self._engine, self.limit, self._ttl = engine, limit, ttl
        self._count, self._expires = 0, 0.0
        self._lock = threading.Lock()

    def over(self) -> bool:
        if self.limit <= 0:
            return False
        if time.monotonic() >= self._expires and self._lock.acquire(blocking=False):
            try:
                with self._engine.connect() as conn:
                    self._count = pending_count(conn, self.limit + 1)
            except Exception as exc:  # not this guard's to report: the claim will
                log.warning("backlog count unavailable: %s", type(exc).__name__)
            finally:
                self._expires = time.monotonic() + self._ttl
                self._lock.release()
        return self._count > self.limit


class BacklogFull(Unavailable):
    """The inbox's backlog is full; retry later."""

    code = "backlog_full"
    retry_after = 30


def check_backlog(backlog: Backlog) -> None:
    if backlog.over():
        raise BacklogFull()


def check_rate(limiter: RateLimiter, source: Source) -> None:
    rate = source.options.rate_limit_per_second
    if rate is None:
        return
    wait = limiter.take(source.id, rate, source.options.burst)
    if wait > 0:
        raise TooManyRequests("This source is over its rate limit.", retry_after=retry_after(wait))
