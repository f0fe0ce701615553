"""Fixtures for the outbound client's tests: no DNS, a recording local HTTP(S) server.

All traffic stays on 127.0.0.1; names are never looked up in DNS (numeric hosts, or a
monkeypatched ``ssrf.resolve``), which an autouse fixture enforces.
"""

from __future__ import annotations

import ipaddress
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inbox.outbound import client as outbound
from tests.unit.outbound.local_server import Recorder, RecordingServer, serving


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


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with serving(RecordingServer()) as srv:
        yield srv


@pytest.fixture
def client(server: RecordingServer) -> Iterator[outbound.Client]:
    """A client allowed to reach 127.0.0.1; closed before the server stops."""
    with outbound.Client(timeout=3.0, allow_private=True) as c:
        yield c


@pytest.fixture
def connect_attempts(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """Record every socket.create_connection address and refuse it."""
    attempts: Recorder = []

    def refuse(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        attempts.append(address)
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refuse)
    return attempts


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
    context.sni_callback = lambda _sock, name, _context: srv.sni.append(name)
    srv.socket = context.wrap_socket(srv.socket, server_side=True)
    with serving(srv):
        yield srv
