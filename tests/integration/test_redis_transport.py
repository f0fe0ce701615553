"""workers/transport.py exists for one upstream bug; these tests say whether it still must.

The sequence is the consumer's when the broker goes away (celery's
``on_connection_error_after_connected``): ``Connection.collect()`` with the broker
unreachable, then ``Connection.close()``. The default channel holds an unacknowledged
message and a BRPOP in flight, and a second channel (the worker has several) is polling
too: its close fails first, so the transport stops closing channels and the default one
stays open while ``collect()`` detaches the transport. Upstream kombu then raises an
AttributeError (not a connection error: the worker exits); ours closes quietly.

When the upstream test fails, kombu has fixed it (celery/kombu#582): delete
workers/transport.py and its use in workers/app.py, and these tests.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from kombu import Connection, Exchange, Queue

from tests.brokers import PrivateRedis


def _collect_then_close(tmp_path: Path, transport: str) -> None:
    server = PrivateRedis(tmp_path / "redis")
    conn = Connection(server.url, transport=transport)
    try:
        default = conn.default_channel
        work = Queue("t43-work", Exchange("t43-work"), "t43-work")
        delivered: list[object] = []
        consumer = conn.Consumer([work], callbacks=[lambda _b, m: delivered.append(m)],
                                 channel=default)  # fmt: skip
        consumer.qos(prefetch_count=4)  # room for more: a BRPOP stays in flight
        consumer.consume()
        other = conn.channel()
        idle = Queue("t43-idle", Exchange("t43-idle"), "t43-idle")
        conn.Consumer([idle], callbacks=[lambda _b, _m: None], channel=other).consume()
        conn.Producer(channel=default).publish(
            {"event": 1}, exchange=work.exchange, routing_key="t43-work", declare=[work]
        )
        while not delivered:  # drain_events waits at most its timeout for the message
            conn.drain_events(timeout=10)
        with pytest.raises(socket.timeout):
            conn.drain_events(timeout=0.2)  # both channels now wait in BRPOP
        assert default._in_poll and other._in_poll  # type: ignore[attr-defined]
        assert len(default.qos._delivered) == 1  # type: ignore[attr-defined]
        server.stop()
        conn.collect()
        assert not default.closed, "the setup no longer leaves the default channel open"
        conn.close()
    finally:
        server.stop()


def test_upstream_kombu_still_crashes_closing_after_collect(tmp_path: Path) -> None:
    with pytest.raises(AttributeError, match="hostname"):
        _collect_then_close(tmp_path, "redis")


def test_our_transport_closes_after_collect(tmp_path: Path) -> None:
    _collect_then_close(tmp_path, "workers.transport:Transport")
