"""The receiver under gunicorn: concurrent copies, chunked bodies, a crash after COMMIT."""

from __future__ import annotations

import http.client
import json
import threading

import pytest
from sqlalchemy import text

from tests.helpers import body_of, hmac_headers
from tests.procs import Gunicorn

pytestmark = pytest.mark.e2e


def fire_together(server: Gunicorn, requests: list[tuple[bytes, dict[str, str]]], path: str):
    """Send every request at once: each thread has its own connection, released by a barrier."""
    barrier = threading.Barrier(len(requests))
    results: list[tuple[int, dict[str, str], bytes] | None] = [None] * len(requests)

    def send(i: int) -> None:
        body, headers = requests[i]
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.connect()
        barrier.wait()
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        results[i] = (resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        conn.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def count(engine, sql: str = "SELECT count(*) FROM events") -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def test_ten_copies_at_once_make_one_row_and_ten_2xx(gunicorn, make_source, engine):
    src = make_source()
    body = body_of({"signal": "sim-swap", "msisdn": "x"})
    results = fire_together(gunicorn, [(body, hmac_headers("s3cret", body, "same"))] * 10, src.path)
    statuses = [r[0] for r in results]
    assert statuses == [202] * 10
    assert sum(1 for r in results if "idempotent-replayed" not in r[1]) == 1
    assert len({r[2] for r in results}) == 1  # every copy got the same answer
    assert count(engine) == 1
    assert count(engine, "SELECT duplicate_count FROM events") == 9


def test_same_key_two_bodies_at_once_one_accepted_one_422(gunicorn, make_source, engine):
    src = make_source()
    a, b = body_of({"v": "a"}), body_of({"v": "b"})
    results = fire_together(
        gunicorn,
        [(a, hmac_headers("s3cret", a, "k")), (b, hmac_headers("s3cret", b, "k"))],
        src.path,
    )
    assert sorted(r[0] for r in results) == [202, 422]
    assert count(engine) == 1
    assert count(engine, "SELECT count FROM idempotency_conflicts") == 1


def test_chunked_body_over_the_limit_is_413(gunicorn, make_source, engine):
    src = make_source(max_body_bytes=1000)
    body = body_of({"pad": "x" * 5000})
    headers = hmac_headers("s3cret", body, "chunky")
    conn = http.client.HTTPConnection("127.0.0.1", gunicorn.port, timeout=30)
    conn.request(
        "POST",
        src.path,
        body=iter([body[:2000], body[2000:]]),
        headers=headers,
        encode_chunked=True,
    )
    resp = conn.getresponse()
    assert resp.status == 413
    assert json.loads(resp.read())["error"]["code"] == "payload_too_large"
    conn.close()
    small = body_of({"pad": "x" * 100})
    conn = http.client.HTTPConnection("127.0.0.1", gunicorn.port, timeout=30)
    conn.request(
        "POST",
        src.path,
        body=iter([small[:10], small[10:]]),
        headers=hmac_headers("s3cret", small, "chunk-ok"),
        encode_chunked=True,
    )
    assert conn.getresponse().status == 202
    conn.close()
    assert count(engine) == 1


def test_crash_after_commit_then_the_retry_gets_the_replay(web_env, make_source, engine):
    src = make_source()
    server = Gunicorn(web_env, app="tests.e2e.crash_app:app", workers=1)
    try:
        body = body_of({"id": "crash-1"})
        headers = hmac_headers("s3cret", body, "crash-key")
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            server.request("POST", src.path, body, headers)  # the process died: no answer
        assert count(engine) == 1  # but the event was committed
        server.wait_ready()  # gunicorn replaced the dead worker
        status, resp_headers, answer = server.request("POST", src.path, body, headers)
        assert status == 202
        assert resp_headers["idempotent-replayed"] == "true"
        assert json.loads(answer)["status"] == "accepted"
        assert count(engine) == 1
    finally:
        server.stop()


def test_the_deployed_config_recycles_keep_alive_connections(web_env):
    """web/gunicorn_conf.py closes a keep-alive connection after n/2 to 3n/2 requests,
    saying so with ``Connection: close`` on the last answer (WEB_KEEPALIVE_REQUESTS=n)."""
    env = {**web_env, "WEB_KEEPALIVE_REQUESTS": "4"}
    server = Gunicorn(env, workers=1, extra=("-c", "web/gunicorn_conf.py"))
    try:
        for _ in range(3):  # three connections: three draws of the limit
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            answered = 0
            while answered < 10:
                conn.request("GET", "/healthz")
                resp = conn.getresponse()
                resp.read()
                answered += 1
                if resp.getheader("Connection", "").lower() == "close":
                    break
            conn.close()
            assert 2 <= answered < 6, answered
    finally:
        server.stop()
