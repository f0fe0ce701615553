"""The doorbell's flag (``broker.make_doorbell``) on a real Redis: while a drain is
pending, rings send nothing; a ring that could not be sent leaves no flag behind, which
would hold back every ring for its TTL (events stranded that long after a broker restart)."""

from __future__ import annotations

import pytest
import redis

from inbox.infra.broker import FLAG, make_doorbell


def test_a_ring_that_could_not_be_sent_leaves_no_flag(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.delete(FLAG)
    broker_up = [False]
    sent: list[int] = []

    def send() -> None:
        if not broker_up[0]:
            raise ConnectionError("the broker is restarting")
        sent.append(1)

    ring = make_doorbell(redis_url, send)
    with pytest.raises(ConnectionError):
        ring()
    assert client.get(FLAG) is None  # the next ring is not held back
    broker_up[0] = True
    ring()
    assert sent == [1] and client.get(FLAG) == b"1"
    ring()  # a drain is pending: coalesced
    assert sent == [1]
    client.delete(FLAG)
