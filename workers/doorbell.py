"""The doorbell: after a commit, make sure one drain task is on its way.

A Redis flag (SET NX) coalesces rings: while a drain is pending, further rings
send nothing. The drain task clears the flag *before* it claims, so an event
committed before a suppressed ring is always seen by that drain's claim; one
committed after the clear rings anew. The flag expires, and the sweeper re-rings,
so a lost message delays events by at most one sweep.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

FLAG = "inbox:doorbell"
FLAG_TTL_MS = 10_000


def make_doorbell(redis_url: str, send: Callable[[], None]) -> Callable[[], None]:
    client = redis.Redis.from_url(redis_url, socket_timeout=0.5, socket_connect_timeout=0.5)

    def ring() -> None:
        if client.set(FLAG, b"1", nx=True, px=FLAG_TTL_MS):
            send()

    return ring


def clear(redis_url: str) -> None:
    redis.Redis.from_url(redis_url, socket_timeout=0.5).delete(FLAG)
