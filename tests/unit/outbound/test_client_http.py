"""The client against a local HTTP(S) server: answers, pooling, timeouts, TLS names."""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

import pytest

from inbox.outbound import client as outbound
from tests.unit.outbound.local_server import (
    PATTERN,
    RecordingServer,
    fake_resolver,
    wait_for,
)

# ---------------------------------------------------------------------------------------------
# Deliveries to a local server


def test_post_delivers_body_and_headers(server: RecordingServer, client: outbound.Client) -> None:
    body = b'{"event": "invoice.paid"}'
    response = client.post(
        server.url("/ok?attempt=1"),
        body,
        {
            "Content-Type": "application/json",
            "Webhook-Signature": "v1,abc",
            "Content-Length": "999",  # set by the client itself
        },
    )
    assert response.status == 200
    assert response.body_excerpt == b'{"ok": true}'
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-multi"] == "one, two"
    assert all(name == name.lower() for name in response.headers)
    assert 0 < response.latency_ms < 3000
    [seen] = server.seen
    assert seen.path == "/ok?attempt=1"
    assert seen.body == body
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["webhook-signature"] == "v1,abc"
    assert seen.headers["content-length"] == str(len(body))
    assert seen.headers["host"] == f"127.0.0.1:{server.port}"


def test_response_is_frozen(server: RecordingServer, client: outbound.Client) -> None:
    response = client.post(server.url("/ok"), b"", {})
    with pytest.raises(AttributeError):
        response.status = 201  # type: ignore[misc]


def test_redirect_is_returned_not_followed(
    server: RecordingServer, client: outbound.Client
) -> None:
    response = client.post(server.url("/redirect"), b"{}", {})
    assert response.status == 302
    assert response.headers["location"] == "http://127.0.0.1:1/elsewhere"
    assert [s.path for s in server.seen] == ["/redirect"]


def test_server_error_is_returned(server: RecordingServer, client: outbound.Client) -> None:
    response = client.post(server.url("/error"), b"{}", {})
    assert response.status == 500
    assert response.body_excerpt == b"boom"


def test_chunked_body(server: RecordingServer, client: outbound.Client) -> None:
    response = client.post(server.url("/chunked"), b"{}", {})
    assert response.body_excerpt == b"hello chunked world"
    assert client.post(server.url("/ok"), b"{}", {}).status == 200
    assert server.connections == 1


def test_excerpt_is_1024_bytes_and_a_drained_connection_is_reused(
    server: RecordingServer, client: outbound.Client
) -> None:
    response = client.post(server.url("/big?n=5000"), b"{}", {})
    assert response.body_excerpt == (PATTERN * 4)[:1024]
    assert client.post(server.url("/ok"), b"{}", {}).status == 200
    assert server.connections == 1


def test_body_too_large_to_drain_closes_the_connection(
    server: RecordingServer, client: outbound.Client
) -> None:
    response = client.post(server.url("/big?n=300000"), b"{}", {})
    assert response.status == 200
    assert len(response.body_excerpt) == 1024
    assert client.post(server.url("/ok"), b"{}", {}).status == 200
    assert server.connections == 2


def test_keep_alive_reuses_one_connection(server: RecordingServer, client: outbound.Client) -> None:
    for _ in range(3):
        assert client.post(server.url("/ok"), b"{}", {}).status == 200
    assert len(server.seen) == 3
    assert {s.connection for s in server.seen} == {1}
    assert server.connections == 1


def test_reconnects_after_the_server_closed_the_kept_connection(
    server: RecordingServer, client: outbound.Client
) -> None:
    assert client.post(server.url("/close-after"), b"1", {}).status == 200
    assert wait_for(lambda: server.closed_connections == 1)
    assert client.post(server.url("/ok"), b"2", {}).status == 200
    assert [(s.body, s.connection) for s in server.seen] == [(b"1", 1), (b"2", 2)]


def test_connection_close_response_is_not_kept(
    server: RecordingServer, client: outbound.Client
) -> None:
    assert client.post(server.url("/conn-close"), b"{}", {}).body_excerpt == b"bye"
    assert client.post(server.url("/ok"), b"{}", {}).status == 200
    assert server.connections == 2


def test_no_retry_once_response_bytes_arrived(
    server: RecordingServer, client: outbound.Client
) -> None:
    assert client.post(server.url("/ok"), b"{}", {}).status == 200
    with pytest.raises(outbound.ConnectError):
        client.post(server.url("/reset-midway"), b"{}", {})
    assert [s.path for s in server.seen] == ["/ok", "/reset-midway"]


def test_a_kept_connection_closed_unanswered_is_retried_once_on_a_fresh_one(
    server: RecordingServer, client: outbound.Client
) -> None:
    assert client.post(server.url("/vanish-on-reuse"), b"1", {}).body_excerpt == b"first"
    assert client.post(server.url("/vanish-on-reuse"), b"2", {}).body_excerpt == b"first"
    assert [(s.body, s.connection) for s in server.seen] == [(b"1", 1), (b"2", 1), (b"2", 2)]


def test_a_fresh_connection_closed_unanswered_is_not_retried(
    server: RecordingServer, client: outbound.Client
) -> None:
    with pytest.raises(outbound.ConnectError):
        client.post(server.url("/vanish"), b"{}", {})
    assert [s.path for s in server.seen] == ["/vanish"]


def test_close_closes_kept_connections(server: RecordingServer) -> None:
    c = outbound.Client(timeout=3.0, allow_private=True)
    try:
        assert c.post(server.url("/ok"), b"{}", {}).status == 200
        assert server.closed_connections == 0
    finally:
        c.close()
    assert wait_for(lambda: server.closed_connections == 1)


# ---------------------------------------------------------------------------------------------
# Failures


def test_server_that_never_answers_times_out() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # connections complete in the backlog; nothing is ever accepted
        port = listener.getsockname()[1]
        with outbound.Client(timeout=0.5, allow_private=True) as c:
            started = time.monotonic()
            with pytest.raises(outbound.Timeout) as caught:
                c.post(f"http://127.0.0.1:{port}/hook", b"{}", {})
            elapsed = time.monotonic() - started
    assert caught.value.kind == "timeout"
    assert elapsed < 0.5 + 1.0


def test_timeout_bounds_the_whole_response_not_each_read(server: RecordingServer) -> None:
    with outbound.Client(timeout=0.5, allow_private=True) as c:
        started = time.monotonic()
        with pytest.raises(outbound.Timeout):
            c.post(server.url("/dribble"), b"{}", {})
        elapsed = time.monotonic() - started
    assert elapsed < 0.5 + 1.0


def test_closed_port_is_a_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with outbound.Client(timeout=2.0, allow_private=True) as c:
        with pytest.raises(outbound.ConnectError) as caught:
            c.post(f"http://127.0.0.1:{port}/hook", b"{}", {})
    assert caught.value.kind == "connect"
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)


# ---------------------------------------------------------------------------------------------
# HTTPS: the certificate is checked against the URL's host name, on the pinned address


def test_https_verifies_the_certificate_for_the_url_host(
    monkeypatch: pytest.MonkeyPatch, tls_files: tuple[Path, Path], tls_server: RecordingServer
) -> None:
    fake_resolver(monkeypatch, {"inbox.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    context = ssl.create_default_context(cafile=str(tls_files[0]))
    with outbound.Client(timeout=3.0, allow_private=True, ssl_context=context) as c:
        for _ in range(2):
            response = c.post(f"https://inbox.test:{tls_server.port}/ok", b"tls", {})
            assert response.status == 200
        with pytest.raises(outbound.ConnectError) as caught:
            c.post(f"https://other.test:{tls_server.port}/ok", b"tls", {})
    assert isinstance(caught.value.__cause__, ssl.SSLCertVerificationError)
    assert [s.headers["host"] for s in tls_server.seen] == [f"inbox.test:{tls_server.port}"] * 2
    assert tls_server.connections == 1
    assert tls_server.sni == ["inbox.test", "other.test"]  # the URL's host, not the address


def test_https_with_system_trust_refuses_a_self_signed_certificate(
    monkeypatch: pytest.MonkeyPatch, tls_server: RecordingServer
) -> None:
    fake_resolver(monkeypatch, {"inbox.test": ["127.0.0.1"]})
    with outbound.Client(timeout=3.0, allow_private=True) as c:
        with pytest.raises(outbound.ConnectError):
            c.post(f"https://inbox.test:{tls_server.port}/ok", b"tls", {})
    assert tls_server.seen == []
