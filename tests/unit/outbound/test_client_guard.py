"""The client keeps to the guard: refused destinations, DNS rebinding, URLs and headers
that cannot be sent; all before any connection."""

from __future__ import annotations

import ipaddress
import socket

import httpcore
import pytest

from inbox.outbound import client as outbound
from inbox.outbound import network, ssrf
from tests.unit.outbound.local_server import (
    PUBLIC_V4,
    Recorder,
    RecordingServer,
    fake_resolver,
)

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


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_proxy_settings_in_the_environment_are_ignored(
    monkeypatch: pytest.MonkeyPatch, connect_attempts: Recorder, scheme: str
) -> None:
    # A proxy would connect to the name itself, past the guard; 127.0.0.9 would also be refused.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.9:3128")
    fake_resolver(monkeypatch, {"tenant.example": [PUBLIC_V4]})
    with outbound.Client() as c, pytest.raises(outbound.ConnectError):
        c.post(f"{scheme}://tenant.example/hook", b"{}", {})
    assert connect_attempts == [(PUBLIC_V4, 443 if scheme == "https" else 80)]


def test_the_guard_is_the_backend_every_connection_goes_through(
    monkeypatch: pytest.MonkeyPatch, connect_attempts: Recorder
) -> None:
    fake_resolver(monkeypatch, {"inside.example": ["10.1.2.3"]})
    with pytest.raises(ssrf.BlockedAddress):
        network.GuardedBackend(allow_private=False).connect_tcp("inside.example", 443, 1.0)
    assert connect_attempts == []
    with pytest.raises(httpcore.ConnectError):
        network.GuardedBackend(allow_private=True).connect_tcp("inside.example", 443, 1.0)
    assert connect_attempts == [("10.1.2.3", 443)]


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
