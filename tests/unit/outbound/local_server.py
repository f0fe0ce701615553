"""A recording local HTTP server and helpers for the outbound client's tests (127.0.0.1 only)."""

from __future__ import annotations

import ipaddress
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from inbox.outbound import ssrf

PUBLIC_V4 = "93.184.216.34"


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
        self.served = 0  # requests read on this connection

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.closed()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.served += 1
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

    def route_vanish(self, query: dict[str, list[str]]) -> None:
        # Read the request, then close without a byte of answer.
        self.close_connection = True

    def route_vanish_on_reuse(self, query: dict[str, list[str]]) -> None:
        # Answer the first request on a connection; close on the next one without answering,
        # as a server does whose idle timeout fired just as the request arrived.
        if self.served == 1:
            self.reply(200, b"first")
        else:
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
        self.sni: list[str | None] = []  # the TLS server names clients sent (a TLS server)
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


@contextmanager
def serving(srv: RecordingServer) -> Iterator[RecordingServer]:
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


Recorder = list[tuple[str, int]]


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
