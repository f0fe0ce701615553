"""The receiver under the real web server: concurrent copies, chunked bodies, a crash."""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
from collections.abc import Sequence

import pytest
from sqlalchemy import text

from tests.helpers import EVENTS, body_of, hmac_headers, insert_pending
from tests.procs import Web

pytestmark = pytest.mark.e2e


def fire_together(
    server: Web | Sequence[Web], requests: list[tuple[bytes, dict[str, str]]], path: str
):
    """Send every request at once: each thread has its own connection, released by a barrier.

    ``server`` is one server for every request, or one per request (copies spread over
    several processes)."""
    servers = [server] * len(requests) if isinstance(server, Web) else list(server)
    assert len(servers) == len(requests)
    barrier = threading.Barrier(len(requests))
    results: list[tuple[int, dict[str, str], bytes] | None] = [None] * len(requests)

    def send(i: int) -> None:
        body, headers = requests[i]
        conn = http.client.HTTPConnection("127.0.0.1", servers[i].port, timeout=30)
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


def test_ten_copies_at_once_make_one_row_and_ten_2xx(web_server, make_source, engine):
    src = make_source()
    body = body_of({"signal": "sim-swap", "msisdn": "x"})
    results = fire_together(
        web_server, [(body, hmac_headers("s3cret", body, "same"))] * 10, src.path
    )
    statuses = [r[0] for r in results]
    assert statuses == [202] * 10
    assert sum(1 for r in results if "idempotent-replayed" not in r[1]) == 1
    assert len({r[2] for r in results}) == 1  # every copy got the same answer
    assert count(engine) == 1
    assert count(engine, f"SELECT duplicate_count FROM ({EVENTS}) AS e") == 9


def test_same_key_two_bodies_at_once_one_accepted_one_422(web_server, make_source, engine):
    src = make_source()
    a, b = body_of({"v": "a"}), body_of({"v": "b"})
    results = fire_together(
        web_server,
        [(a, hmac_headers("s3cret", a, "k")), (b, hmac_headers("s3cret", b, "k"))],
        src.path,
    )
    assert sorted(r[0] for r in results) == [202, 422]
    assert count(engine) == 1
    assert count(engine, "SELECT count FROM idempotency_conflicts") == 1


def test_chunked_body_over_the_limit_is_413(web_server, make_source, engine):
    src = make_source(max_body_bytes=1000)
    body = body_of({"pad": "x" * 5000})
    headers = hmac_headers("s3cret", body, "chunky")
    conn = http.client.HTTPConnection("127.0.0.1", web_server.port, timeout=30)
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
    conn = http.client.HTTPConnection("127.0.0.1", web_server.port, timeout=30)
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
    server = Web(web_env, app="tests.e2e.crash_app:app", workers=1)
    try:
        body = body_of({"id": "crash-1"})
        headers = hmac_headers("s3cret", body, "crash-key")
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            server.request("POST", src.path, body, headers)  # the process died: no answer
        assert count(engine) == 1  # but the event was committed
        server.wait_ready()  # the server replaced the dead worker
        status, resp_headers, answer = server.request("POST", src.path, body, headers)
        assert status == 202
        assert resp_headers["idempotent-replayed"] == "true"
        assert json.loads(answer)["status"] == "accepted"
        assert count(engine) == 1
    finally:
        server.stop()


def test_the_web_server_closes_keep_alive_connections_now_and_then(web_env):
    """With WEB_KEEPALIVE_REQUESTS=n, about one answer in n says ``Connection: close``, and
    the server then closes that connection: 200 requests at n=4 give 50 closes on average
    (standard deviation 6); 25 to 80 allows four deviations either way."""
    server = Web({**web_env, "WEB_KEEPALIVE_REQUESTS": "4"}, workers=1)
    try:
        closes = 0
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        for _ in range(200):
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            resp.read()
            if resp.getheader("Connection", "").lower() == "close":
                closes += 1
                assert conn.sock is None  # http.client let go of it; the server closed too:
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.close()
        assert 25 <= closes <= 80, closes
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        with raw:
            while True:  # on one raw connection, until an answer says close
                raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = raw.recv(65536)
                while b"\r\n\r\n" not in answer:
                    answer += raw.recv(65536)
                head, _, body = answer.partition(b"\r\n\r\n")
                length = int(re.search(rb"content-length: *(\d+)", head.lower()).group(1))
                while len(body) < length:
                    body += raw.recv(65536)
                if b"connection: close" in head.lower():
                    break
            raw.settimeout(5)
            assert raw.recv(65536) == b""  # end of stream: the server closed it
    finally:
        server.stop()


def test_keep_alive_connections_stay_open_when_the_limit_is_zero(web_env):
    server = Web({**web_env, "WEB_KEEPALIVE_REQUESTS": "0"}, workers=1)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        for _ in range(100):
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            resp.read()
            assert resp.getheader("Connection", "").lower() != "close"
        conn.close()
    finally:
        server.stop()


def test_process_variables_named_like_headers_are_not_read_as_headers(web_env, make_source, engine):
    """The server builds each request's environ on a copy of the process environment;
    HTTP_* variables there must not reach the stored headers as if the sender sent them."""
    src = make_source()
    env = {**web_env, "HTTP_X_LEAKED": "from-the-environment", "HTTP_PROXY": "http://u:p@proxy"}
    server = Web(env, workers=1)
    try:
        body = body_of({"id": "env-1"})
        status, _, _ = server.request("POST", src.path, body, hmac_headers("s3cret", body, "k"))
        assert status == 202
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT headers FROM events")).scalar_one()
        assert "x-leaked" not in {k.lower() for k in stored}
        assert "proxy" not in {k.lower() for k in stored}
    finally:
        server.stop()


def test_the_web_server_removes_the_metrics_directory_it_made(web_env, make_source, tmp_path):
    """Without PROMETHEUS_MULTIPROC_DIR the server makes a private directory (in TMPDIR),
    its workers write their metrics there (so the main process did not load
    prometheus_client before the variable was set), and it is gone once the server stops."""
    env = {**web_env, "PROMETHEUS_MULTIPROC_DIR": None, "TMPDIR": str(tmp_path)}
    server = Web(env, workers=1)
    try:
        src = make_source()
        body = body_of({"id": "m-1"})
        assert server.request("POST", src.path, body, hmac_headers("s3cret", body, "m"))[0] == 202
        (made,) = tmp_path.glob("inbox-metrics-*")
        assert list(made.glob("*.db"))  # the worker's metric files
    finally:
        server.stop()
    assert server.popen.returncode == 0
    assert not list(tmp_path.glob("inbox-metrics-*"))


def test_a_503_before_the_body_keeps_the_senders_connection_usable(web_env, make_source, engine):
    """Past the backlog bound the receiver answers 503 before it reads the body. A body it
    did not read would be taken for the next request, so it reads and drops a small one
    and the kept-alive connection carries the next request; a large one is answered with
    ``Connection: close``, which the sender sees, instead of a connection dropped under
    its next request (every kept-alive sender saw a broken pipe that way)."""
    src = make_source()
    insert_pending(engine, src, 3, {"type": "waiting"})
    # No random close (WEB_KEEPALIVE_REQUESTS): every close here is the rule's.
    server = Web({**web_env, "INBOX_MAX_BACKLOG": "2", "WEB_KEEPALIVE_REQUESTS": "0"}, workers=1)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.connect()
        sock = conn.sock
        for i in range(5):
            body = body_of({"n": i, "pad": "x" * 4000})
            conn.request("POST", src.path, body=body, headers=hmac_headers("s3cret", body, f"b{i}"))
            resp = conn.getresponse()
            answer = json.loads(resp.read())
            assert resp.status == 503 and answer["error"]["code"] == "backlog_full"
            assert int(resp.getheader("Retry-After")) > 0
            assert resp.getheader("Connection", "").lower() != "close"
        conn.request("GET", "/healthz")  # the same connection, still in step
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200 and conn.sock is sock
        big = body_of({"pad": "y" * 300_000})
        conn.request("POST", src.path, body=big, headers=hmac_headers("s3cret", big, "big"))
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 503 and resp.getheader("Connection", "").lower() == "close"
        assert conn.sock is None  # the sender knows to open a new one
        conn.close()
        assert count(engine) == 3  # nothing stored past the bound
    finally:
        server.stop()
