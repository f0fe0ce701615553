"""The SSRF guard: which addresses pass, how names and numeric hosts are resolved."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inbox.outbound import client as outbound
from inbox.outbound import ssrf
from tests.unit.outbound.local_server import (
    PUBLIC_V4,
    Recorder,
    fake_resolver,
)

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
