"""The outbound webhook HTTP client and its SSRF guard.

All traffic stays on 127.0.0.1; names are never looked up in DNS (numeric hosts, or a
monkeypatched ``ssrf.resolve``), which an autouse fixture enforces.
"""

from __future__ import annotations

import ipaddress
import shutil
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inbox.outbound import http as outbound
from inbox.outbound import ssrf

PUBLIC_V4 = "93.184.216.34"

# ---------------------------------------------------------------------------------------------
# Fixtures: no DNS, a recording local HTTP server


@pytest.fixture(autouse=True)
def _numeric_hosts_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any test that would send a name to the system resolver."""
    real_getaddrinfo = socket.getaddrinfo

    def guarded(host: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise AssertionError(f"test tried to resolve {host!r}") from None
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", guarded)


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int


PATTERN = bytes(range(256))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 5
    server: RecordingServer

    def setup(self) -> None:
        super().setup()
        self.connection_no = self.server.opened()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.closed()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        self.server.record(Seen(self.path, headers, body, self.connection_no))
        split = urllib.parse.urlsplit(self.path)
        route = getattr(self, "route_" + split.path.strip("/").replace("-", "_"), None)
        if route is None:
            self.reply(404, b"no such route")
        else:
            route(urllib.parse.parse_qs(split.query))

    def reply(self, status: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            self.close_connection = True

    def route_ok(self, query: dict[str, list[str]]) -> None:
        multi = (("X-Multi", "one"), ("X-Multi", "two"), ("Content-Type", "application/json"))
        self.reply(200, b'{"ok": true}', multi)

    def route_redirect(self, query: dict[str, list[str]]) -> None:
        self.reply(302, b"", (("Location", "http://127.0.0.1:1/elsewhere"),))

    def route_error(self, query: dict[str, list[str]]) -> None:
        self.reply(500, b"boom")

    def route_big(self, query: dict[str, list[str]]) -> None:
        size = int(query["n"][0])
        self.reply(200, (PATTERN * (size // 256 + 1))[:size])

    def route_close_after(self, query: dict[str, list[str]]) -> None:
        # Answer as if the connection stays open, then close it anyway (an idle timeout).
        self.reply(200, b"done")
        self.close_connection = True

    def route_conn_close(self, query: dict[str, list[str]]) -> None:
        self.reply(200, b"bye", (("Connection", "close"),))

    def route_chunked(self, query: dict[str, list[str]]) -> None:
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for part in (b"hello ", b"chunked ", b"world"):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
        self.wfile.write(b"0\r\n\r\n")

    def route_reset_midway(self, query: dict[str, list[str]]) -> None:
        # A few bytes of a status line, then a TCP reset (no FIN first).
        self.wfile.write(b"HTTP/1.1 20")
        time.sleep(0.2)
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()  # really closed when finish() closes rfile
        self.close_connection = True

    def route_dribble(self, query: dict[str, list[str]]) -> None:
        # Headers one byte at a time, each well within a per-read timeout.
        self.close_connection = True
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            for _ in range(80):
                time.sleep(0.05)
                self.wfile.write(b"z")
        except OSError:
            pass


class RecordingServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() waits for the handler threads

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[Seen] = []
        self.connections = 0
        self.closed_connections = 0
        super().__init__(("127.0.0.1", 0), Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client closing a connection with unread data resets it; that is expected here.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would look the address up with getfqdn().
        socketserver.TCPServer.server_bind(self)
        self.server_name = "127.0.0.1"
        self.server_port = int(self.server_address[1])

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def opened(self) -> int:
        with self.lock:
            self.connections += 1
            return self.connections

    def closed(self) -> None:
        with self.lock:
            self.closed_connections += 1

    def record(self, seen: Seen) -> None:
        with self.lock:
            self.seen.append(seen)


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    srv = RecordingServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


@pytest.fixture
def client(server: RecordingServer) -> Iterator[outbound.Client]:
    """A client allowed to reach 127.0.0.1; closed before the server stops."""
    with outbound.Client(timeout=3.0, allow_private=True) as c:
        yield c


Recorder = list[tuple[str, int]]


@pytest.fixture
def connect_attempts(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """Record every socket.create_connection address and refuse it."""
    attempts: Recorder = []

    def refuse(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        attempts.append(address)
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refuse)
    return attempts


def fake_resolver(
    monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]
) -> Callable[[], int]:
    """Make ssrf.resolve answer from ``answers``; returns a call counter."""
    calls: list[str] = []

    def resolve(host: str, port: int) -> list[ssrf.IPAddress]:
        calls.append(host)
        return [ipaddress.ip_address(a) for a in answers[host]]

    monkeypatch.setattr(ssrf, "resolve", resolve)
    return lambda: len(calls)


def wait_for(condition: Callable[[], bool], seconds: float = 3.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


# ---------------------------------------------------------------------------------------------
# SSRF guard

REFUSED_ADDRESSES = [
    "127.0.0.1",
    "127.255.0.9",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.0",
    "0.1.2.3",
    "224.0.0.1",
    "239.255.255.250",
    "255.255.255.255",
    "240.0.0.1",
    "192.0.2.10",
    "198.51.100.1",
    "203.0.113.7",
    "198.18.0.1",
    "192.0.0.1",
    "::1",
    "::",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:10.1.2.3",
    "::ffff:8.8.8.8",  # IPv4-mapped is refused even when the embedded address is public
    "::127.0.0.1",
    "fe80::1",
    "fc00::1",
    "fd12:3456::1",
    "fec0::1",
    "ff02::1",
    "ff0e::1",
    "2001:db8::1",
    "2002:7f00:1::",
    "2002:a9fe:a9fe::1",
    "2002:c0a8:101::1",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::5db8:d822",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo for client 127.0.0.1
    "100::1",
]

PUBLIC_ADDRESSES = [
    PUBLIC_V4,
    "8.8.8.8",
    "1.1.1.1",
    "2606:4700::1111",
    "2a00:1450:4001:80b::200e",
    "2002:5db8:d822::1",  # 6to4 of a public address
    "64:ff9b::5db8:d822",  # NAT64 of a public address
]


@pytest.mark.parametrize("address", REFUSED_ADDRESSES)
def test_check_ip_refuses_non_public_addresses(address: str) -> None:
    with pytest.raises(ssrf.BlockedAddress):
        ssrf.check_ip(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC_ADDRESSES)
def test_check_ip_allows_public_unicast_addresses(address: str) -> None:
    ssrf.check_ip(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("10.0.0.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "shared address space"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("fc00::1", "private"),
        ("::ffff:169.254.169.254", "link-local"),
        ("2002:7f00:1::", "loopback"),
        ("64:ff9b::a00:1", "private"),
    ],
)
def test_blocked_message_names_the_class_not_the_address(address: str, reason: str) -> None:
    with pytest.raises(ssrf.BlockedAddress) as caught:
        ssrf.check_ip(ipaddress.ip_address(address))
    assert caught.value.reason.startswith(reason)
    assert reason in str(caught.value)
    assert address not in str(caught.value)
    assert caught.value.address == ipaddress.ip_address(address)


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_embedded_ipv4_is_judged_like_the_ipv4_address(value: int) -> None:
    inner = ipaddress.IPv4Address(value)
    try:
        ssrf.check_ip(inner)
        inner_allowed = True
    except ssrf.BlockedAddress:
        inner_allowed = False
    for wrapped in (
        ipaddress.IPv6Address((0x2002 << 112) | (value << 80)),  # 6to4
        ipaddress.IPv6Address((0x64FF9B << 96) | value),  # NAT64
    ):
        try:
            ssrf.check_ip(wrapped)
            wrapped_allowed = True
        except ssrf.BlockedAddress:
            wrapped_allowed = False
        assert wrapped_allowed == inner_allowed, wrapped
    with pytest.raises(ssrf.BlockedAddress):
        ssrf.check_ip(ipaddress.IPv6Address((0xFFFF << 32) | value))  # IPv4-mapped


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("[::1]", "::1"),
        ("::ffff:127.0.0.1", "::ffff:127.0.0.1"),
        ("fe80::1%eth0", "fe80::1"),
        ("[fe80::1%25eth0]", "fe80::1"),
    ],
)
def test_resolve_parses_numeric_hosts_without_dns(host: str, expected: str) -> None:
    assert ssrf.resolve(host, 80) == [ipaddress.ip_address(expected)]


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "2130706433",
        "0177.0.0.1",
        "0x7f000001",
        "0x7f.1",
        "127.1",
        "017700000001",
        "0.0.0.0",
        "[::1]",
        "::",
        "fe80::1%eth0",
        "[::ffff:127.0.0.1]",
        "169.254.169.254",
    ],
)
def test_safe_addresses_refuses_numeric_hosts(host: str) -> None:
    with pytest.raises(ssrf.BlockedAddress):
        ssrf.safe_addresses(host, 80, allow_private=False)
    assert ssrf.safe_addresses(host, 80, allow_private=True)


def test_resolve_asks_getaddrinfo_for_names(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[Any, ...]] = []

    def getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        asked.append((host, port, args, kwargs))
        stream = socket.SOCK_STREAM
        return [
            (socket.AF_INET, stream, 6, "", (PUBLIC_V4, port)),
            (socket.AF_INET6, stream, 6, "", ("2606:4700::1111", port, 0, 0)),
            (socket.AF_INET, stream, 6, "", (PUBLIC_V4, port)),
            (socket.AF_INET6, stream, 6, "", ("fe80::1%eth0", port, 0, 2)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    assert ssrf.resolve("hooks.example.com", 443) == [
        ipaddress.ip_address(PUBLIC_V4),
        ipaddress.ip_address("2606:4700::1111"),
        ipaddress.ip_address("fe80::1"),
    ]
    assert asked == [("hooks.example.com", 443, (), {"type": socket.SOCK_STREAM})]
    with pytest.raises(ssrf.BlockedAddress, match="link-local"):
        ssrf.safe_addresses("hooks.example.com", 443, allow_private=False)


def test_resolve_name_without_addresses_is_a_gaierror(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: [])
    with pytest.raises(socket.gaierror):
        ssrf.resolve("empty.example", 80)


def test_name_with_one_public_and_one_private_address_is_refused(
    monkeypatch: pytest.MonkeyPatch, connect_attempts: Recorder
) -> None:
    fake_resolver(monkeypatch, {"mixed.example": [PUBLIC_V4, "10.0.0.5"]})
    with pytest.raises(ssrf.BlockedAddress, match="private"):
        ssrf.safe_addresses("mixed.example", 443, allow_private=False)
    assert len(ssrf.safe_addresses("mixed.example", 443, allow_private=True)) == 2
    with outbound.Client() as c, pytest.raises(outbound.Blocked):
        c.post("https://mixed.example/hook", b"{}", {})
    assert connect_attempts == []


# ---------------------------------------------------------------------------------------------
# The client refuses blocked destinations before connecting

BLOCKED_URLS = [
    "http://127.0.0.1/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://100.64.0.1/",
    "http://[::1]/",
    "http://[::1]:8080/hook",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://0.0.0.0/",
    "http://[::]/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://0x7f000001/",
    "http://0x7f.1/",
    "http://127.1/",
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",
    "http://[fc00::1]/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://[2002:7f00:1::]/",
    "http://[64:ff9b::7f00:1]/",
    "https://127.0.0.1:8443/hook",
]


@pytest.mark.parametrize("url", BLOCKED_URLS)
def test_client_refuses_blocked_destinations_without_connecting(
    url: str, connect_attempts: Recorder
) -> None:
    with outbound.Client() as c, pytest.raises(outbound.Blocked) as caught:
        c.post(url, b"{}", {"Content-Type": "application/json"})
    assert caught.value.kind == "blocked"
    assert connect_attempts == []


def test_blocked_error_does_not_repeat_the_url(connect_attempts: Recorder) -> None:
    with outbound.Client() as c, pytest.raises(outbound.Blocked) as caught:
        c.post("http://127.0.0.1/hook?token=s3cret", b"", {})
    assert "loopback" in str(caught.value)
    assert "s3cret" not in str(caught.value)
    assert connect_attempts == []


# ---------------------------------------------------------------------------------------------
# DNS rebinding: the connection goes to the address that was checked


@pytest.mark.parametrize(("scheme", "port"), [("http", 80), ("https", 443)])
def test_dns_rebinding_cannot_swap_the_checked_address(
    monkeypatch: pytest.MonkeyPatch, connect_attempts: Recorder, scheme: str, port: int
) -> None:
    answers = iter([[PUBLIC_V4]])
    calls: list[str] = []

    def rebinding_resolve(host: str, port: int) -> list[ssrf.IPAddress]:
        calls.append(host)
        # First answer public, every later answer loopback.
        return [ipaddress.ip_address(a) for a in next(answers, ["127.0.0.1"])]

    monkeypatch.setattr(ssrf, "resolve", rebinding_resolve)
    with outbound.Client() as c:
        with pytest.raises(outbound.ConnectError):
            c.post(f"{scheme}://rebind.example/hook", b"{}", {})
        assert calls == ["rebind.example"]
        assert connect_attempts == [(PUBLIC_V4, port)]
        with pytest.raises(outbound.Blocked):
            c.post(f"{scheme}://rebind.example/hook", b"{}", {})
    assert calls == ["rebind.example", "rebind.example"]
    assert connect_attempts == [(PUBLIC_V4, port)]


def test_connects_to_checked_address_with_the_original_host_header(
    monkeypatch: pytest.MonkeyPatch, server: RecordingServer, client: outbound.Client
) -> None:
    resolutions = fake_resolver(monkeypatch, {"tenant.example": ["127.0.0.1"]})
    response = client.post(f"http://tenant.example:{server.port}/ok", b"x", {})
    assert response.status == 200
    assert resolutions() == 1
    assert server.seen[0].headers["host"] == f"tenant.example:{server.port}"


def test_next_checked_address_is_tried_when_connect_fails(
    monkeypatch: pytest.MonkeyPatch, server: RecordingServer, client: outbound.Client
) -> None:
    # 127.0.0.2 is on the loopback interface, but nothing listens there on this port.
    fake_resolver(monkeypatch, {"two.example": ["127.0.0.2", "127.0.0.1"]})
    response = client.post(f"http://two.example:{server.port}/ok", b"x", {})
    assert response.status == 200
    assert len(server.seen) == 1


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


def test_unresolvable_name_is_a_dns_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(host: str, port: int) -> list[ssrf.IPAddress]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(ssrf, "resolve", fail)
    with outbound.Client() as c, pytest.raises(outbound.DNSError) as caught:
        c.post("https://nowhere.example/hook", b"{}", {})
    assert caught.value.kind == "dns"


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/file",
        "file:///etc/passwd",
        "gopher://127.0.0.1:70/",
        "javascript:alert(1)",
        "",
        "hooks.example.com/path",
        "http://",
        "http:///path",
        "https://:443/",
        "http://user:pw@127.0.0.1/",
        "http://user@127.0.0.1/",
        "http://127.0.0.1:99999/",
        "http://127.0.0.1:0/",
        "http://127.0.0.1:port/",
        "http://exa mple.com/",
        "http://example.com/a b",
        "http://example.com/\r\nX-Injected: 1",
        "http://[::1/",
        "http://[not-an-address]/",
        "http://exa%2Fmple.com/",
        "http://" + "a" * 300 + ".com/",
    ],
)
def test_invalid_urls(url: str, connect_attempts: Recorder) -> None:
    with outbound.Client(allow_private=True) as c, pytest.raises(outbound.InvalidURL) as caught:
        c.post(url, b"{}", {})
    assert caught.value.kind == "invalid_url"
    assert "pw" not in str(caught.value)
    assert connect_attempts == []


@pytest.mark.parametrize(
    "headers",
    [{"X-Bad": "a\r\nInjected: 1"}, {"Bad Name": "x"}, {"X-Nul": "a\0b"}, {"X-Wide": "\u2603"}],
)
def test_unsendable_header_is_refused_before_connecting(
    headers: dict[str, str], connect_attempts: Recorder
) -> None:
    with outbound.Client() as c, pytest.raises(ValueError):
        c.post(f"http://{PUBLIC_V4}/hook", b"{}", headers)
    assert connect_attempts == []


def test_error_classes() -> None:
    kinds = {
        outbound.Blocked: "blocked",
        outbound.ConnectError: "connect",
        outbound.DNSError: "dns",
        outbound.Timeout: "timeout",
        outbound.InvalidURL: "invalid_url",
    }
    for cls, kind in kinds.items():
        assert issubclass(cls, outbound.DeliveryError)
        assert cls.kind == kind
    assert issubclass(outbound.ProtocolError, outbound.ConnectError)


# ---------------------------------------------------------------------------------------------
# HTTPS: the certificate is checked against the URL's host name, on the pinned address


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=inbox.test",
            "-addext",
            "subjectAltName=DNS:inbox.test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def tls_server(tls_files: tuple[Path, Path]) -> Iterator[RecordingServer]:
    cert, key = tls_files
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    srv = RecordingServer()
    srv.socket = context.wrap_socket(srv.socket, server_side=True)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


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


def test_https_with_system_trust_refuses_a_self_signed_certificate(
    monkeypatch: pytest.MonkeyPatch, tls_server: RecordingServer
) -> None:
    fake_resolver(monkeypatch, {"inbox.test": ["127.0.0.1"]})
    with outbound.Client(timeout=3.0, allow_private=True) as c:
        with pytest.raises(outbound.ConnectError):
            c.post(f"https://inbox.test:{tls_server.port}/ok", b"tls", {})
    assert tls_server.seen == []
