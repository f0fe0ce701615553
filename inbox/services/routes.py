"""A short-lived cache of sources, so the hot path does not read them on every request.

Changes (new secrets, a disabled source) take effect within ``ttl`` seconds, plus the time
one refresh takes (at most ``2 * ttl``).

When an entry expires, one request reads it again while the others go on with the entry
they have. Without that, every request arriving during the refresh made its own query,
each taking a pool connection, the claims' included: under load that stalled a worker's
requests every ``ttl`` seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sqlalchemy import Engine

from inbox.domain.records import Source
from inbox.store.reads.sources import find_source


class RouteCache:
    def __init__(
        self, engine: Engine, ttl: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._engine = engine
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], tuple[float, Source | None]] = {}
        self._refreshing: set[tuple[str, str]] = set()

    def get(self, tenant: str, source: str) -> Source | None:
        key = (tenant, source)
        now = self._clock()
        hit = self._entries.get(key)
        if hit is not None:
            expires, found = hit
            if now < expires:
                return found
            if now < expires + self._ttl:
                if not self._take_refresh(key):
                    return found  # another request is reading it; this one keeps what there is
                return self._load(key, now, refreshing=True)
        return self._load(key, now, refreshing=False)

    def _take_refresh(self, key: tuple[str, str]) -> bool:
        with self._lock:
            if key in self._refreshing:
                return False
            self._refreshing.add(key)
            return True

    def _load(self, key: tuple[str, str], now: float, refreshing: bool) -> Source | None:
        try:
            with self._engine.connect() as conn:
                found = find_source(conn, *key)
            if self._ttl > 0:
                with self._lock:
                    if len(self._entries) > 10_000:
                        self._entries.clear()
                    self._entries[key] = (now + self._ttl, found)
            return found
        finally:
            if refreshing:
                with self._lock:
                    self._refreshing.discard(key)
