"""What only a raw socket can send, against the real web server: a body cut short, and a
header given twice."""

from __future__ import annotations

import socket
import time

import pytest
from sqlalchemy import text

from tests.helpers import body_of, hmac_headers
from tests.procs import Web

pytestmark = pytest.mark.e2e


def raw_request(server: Web, head: bytes, body: bytes, half_close: bool = True) -> bytes:
    """Send ``head`` and ``body``, shut the sending side, read the answer until EOF."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head + body)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def head_of(path: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


def events(engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM events")).scalar_one())


def test_a_body_shorter_than_its_content_length_is_400_and_stores_nothing(
    web_server, make_source, engine
):
    src = make_source()
    body = body_of({"signal": "cut short"})
    signed = hmac_headers("s3cret", body, "short")
    headers = [(k, v) for k, v in signed.items()] + [("Content-Length", str(len(body) + 50))]
    answer = raw_request(web_server, head_of(src.path, headers), body)
    assert status_of(answer) == 400, answer[:300]
    assert b'"error"' in answer and b"Content-Length" in answer
    assert events(engine) == 0
    # The same body with its true length is accepted: the server is fine.
    headers[-1] = ("Content-Length", str(len(body)))
    answer = raw_request(web_server, head_of(src.path, headers), body, half_close=False)
    assert status_of(answer) == 202, answer[:300]
    assert events(engine) == 1


def test_two_idempotency_key_headers_are_400(web_server, make_source, engine):
    src = make_source()
    body = body_of({"signal": "two keys"})
    signed = hmac_headers("s3cret", body)
    headers = [(k, v) for k, v in signed.items()]
    headers += [("Idempotency-Key", "a"), ("Idempotency-Key", "b")]
    headers.append(("Content-Length", str(len(body))))
    answer = raw_request(web_server, head_of(src.path, headers), body, half_close=False)
    assert status_of(answer) == 400, answer[:300]
    assert b"Idempotency-Key" in answer
    assert events(engine) == 0
