"""A stalled Redis never delays an answer: the web's doorbell rings from a thread of its
own (``broker.Ringer``), so the 202 goes out while the ring still waits on Redis."""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

from inbox.infra.config import Settings
from tests.helpers import body_of, hmac_headers, wait_for
from web import create_app


class StalledRedis:
    """Accepts connections and reads commands, and never answers: a frozen Redis host.
    Records what arrived and whether the client gave up (closed its end)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.received = b""
        self.client_gave_up = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:  # the doorbell tries again after a failed ring
                    conn.close()
                    return
                self._conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        while True:
            try:
                chunk = conn.recv(4096)
            except OSError:
                return
            if not chunk:
                self.client_gave_up.set()
                return
            self.received += chunk

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._listener.close()
            for conn in self._conns:
                conn.close()


@pytest.fixture
def stalled_redis() -> Iterator[StalledRedis]:
    server = StalledRedis()
    yield server
    server.close()


def test_the_answer_does_not_wait_for_a_stalled_redis(
    settings: Settings, engine: Engine, make_source, stalled_redis: StalledRedis
) -> None:
    stalled = dataclasses.replace(
        settings,
        redis_url=f"redis://127.0.0.1:{stalled_redis.port}/0",
        broker_url="memory://",
    )
    app = create_app(stalled, engine=engine, route_cache_seconds=0)  # the default doorbell
    client = app.test_client()
    src = make_source()
    body = body_of({"amount": 5})
    resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k-stall"))
    assert resp.status_code == 202
    # When the answer was out, the ring's client had not yet given up on Redis (its socket
    # timeout is 0.5 s): the request did not wait for it. Rung in line, the client would
    # have timed out and closed its connection before the 202.
    assert not stalled_redis.client_gave_up.is_set()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events")).scalar() == 1
    # The ring was tried all the same, from the doorbell's thread (the client's first
    # command, before the SET NX of the flag it never got to).
    wait_for(lambda: bool(stalled_redis.received))
    assert stalled_redis.client_gave_up.wait(30)  # and it gave up on its own, later
