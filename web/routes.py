"""A short-lived cache of sources, so the hot path does not read them on every request.

Changes (new secrets, a disabled source) take effect within ``ttl`` seconds.
"""

from __future__ import annotations

import threading
import time

from sqlalchemy import Engine

from inbox.store.sources import Source, find_source


class RouteCache:
    def __init__(self, engine: Engine, ttl: float) -> None:
        self._engine = engine
        self._ttl = ttl
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], tuple[float, Source | None]] = {}

    def get(self, tenant: str, source: str) -> Source | None:
        key = (tenant, source)
        now = time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        with self._engine.connect() as conn:
            found = find_source(conn, tenant, source)
        if self._ttl > 0:
            with self._lock:
                if len(self._entries) > 10_000:
                    self._entries.clear()
                self._entries[key] = (now + self._ttl, found)
        return found
