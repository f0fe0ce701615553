"""A database that stops answering (not one that refuses): every answer within the deadline.

The test starts a PostgreSQL cluster of its own, freezes the postmaster and every backend
(SIGSTOP: the kernel still accepts and acknowledges packets, as for a stalled host) and
checks that each request is answered within INBOX_DB_TIMEOUT_MS + 1 s, as a 503 or as a
202 whose row exists once the cluster runs again.
"""

from __future__ import annotations

import http.client
import signal
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import text

from dev.embedded import PrivatePostgres
from inbox.domain.idempotency import key_digest
from inbox.domain.sources import SourceOptions
from inbox.infra.config import Settings
from inbox.store.db.engine import make_engine
from inbox.store.schema import migrate
from inbox.store.write import sources as store
from tests.helpers import body_of, hmac_headers, wait_for
from tests.procs import Web

pytestmark = pytest.mark.e2e

TIMEOUT_MS = 1500


@pytest.fixture
def cluster() -> Iterator[PrivatePostgres]:
    try:
        c = PrivatePostgres(settings={"fsync": "off"})
    except RuntimeError as exc:
        pytest.skip(str(exc))
    try:
        yield c
    finally:
        c.stop()


def _post(port: int, path: str, body: bytes, key: str) -> tuple[int, float]:
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body=body, headers=hmac_headers("s3cret", body, key))
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.monotonic() - started
    finally:
        conn.close()


def test_a_frozen_database_is_answered_within_the_deadline(cluster: PrivatePostgres) -> None:
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE inbox")
    url = cluster.url.rsplit("/", 1)[0] + "/inbox"
    migrate.upgrade(url)
    engine = make_engine(Settings(database_url=url))
    with engine.begin() as conn:
        store.create_tenant(conn, "acme")
        store.create_source(conn, "acme", "hooks", "hmac", ["s3cret"], SourceOptions())
    path = "/hooks/acme/hooks"
    env = {
        "DATABASE_URL": url,
        "INBOX_DB_TIMEOUT_MS": str(TIMEOUT_MS),
        "INBOX_DB_POOL_SIZE": "4",
        # More threads than requests in flight: a request that waits for a free thread
        # waits before the receiver's deadline starts.
        "WEB_THREADS": "40",
    }
    server = Web(env, workers=1)
    answers: list[tuple[str, int, float]] = []
    try:
        body = body_of({"a": 1})
        for i in range(4):  # warm: connections in the pool, the route cached
            assert _post(server.port, path, body, f"before-{i}")[0] == 202

        def send(key: str) -> None:
            answers.append((key, *_post(server.port, path, body, key)))

        cluster.signal(signal.SIGSTOP)
        try:
            # New keys, and copies of accepted ones (the duplicate path), in two waves:
            # the second finds the pool's connections stuck or cut.
            waves = [
                [f"new-{w}-{i}" for i in range(12)] + [f"before-{i}" for i in range(4)]
                for w in range(2)
            ]
            threads = []
            for n, wave in enumerate(waves):
                for key in wave:
                    t = threading.Thread(target=send, args=(key,))
                    t.start()
                    threads.append(t)
                if n == 0:  # the second wave once the first meets its deadline
                    wait_for(lambda: len(answers) > 0, 60, "the first wave's first answer")
            for t in threads:
                t.join(60)
        finally:
            cluster.signal(signal.SIGCONT)
        # The server answers again: so does the receiver.
        wait_for(
            lambda: _post(server.port, path, body, "after")[0] == 202,
            30,
            "the receiver's recovery",
            interval=0.2,
        )
    finally:
        log = server.output()
        server.stop()
    assert len(answers) == sum(len(w) for w in waves)
    slow = [a for a in answers if a[2] > TIMEOUT_MS / 1000 + 1]
    assert not slow, (slow, log[-3000:])
    assert {status for _, status, _ in answers} <= {202, 503}, answers
    assert any(status == 503 for _, status, _ in answers)
    accepted = [key for key, status, _ in answers if status == 202]
    with engine.connect() as conn:
        src = conn.execute(text("SELECT id, tenant_id FROM sources")).one()
        for key in accepted:
            stored = conn.execute(
                text("SELECT count(*) FROM events WHERE key_digest = :d"),
                {"d": key_digest(src.tenant_id, src.id, key)},
            ).scalar_one()
            assert stored == 1, key
    engine.dispose()
