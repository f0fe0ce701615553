"""SSRF guard: which addresses outbound webhooks may be delivered to.

Only public unicast addresses pass. IPv6 forms that carry an IPv4 address (IPv4-mapped,
IPv4-compatible, 6to4, NAT64, Teredo) have the embedded address checked as well, and host names
are resolved here so that the caller connects to exactly the addresses that were checked.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import TypeAlias

from inbox.domain.errors import InboxError

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address


class BlockedAddress(InboxError):
    """The destination address is not a public unicast address.

    The message names only the address class (e.g. "loopback"); the address itself is kept in
    ``address`` for logs, so an error shown to a tenant does not reveal internal addresses.
    """

    def __init__(self, reason: str, address: IPAddress | None = None) -> None:
        super().__init__(f"destination address is not allowed: {reason}")
        self.reason = reason
        self.address = address


def _v4(cidr: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(cidr)


def _v6(cidr: str) -> ipaddress.IPv6Network:
    return ipaddress.IPv6Network(cidr)


# Checked in order; the first match names the class in the error message.
_V4_RULES: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_v4("0.0.0.0/32"), "unspecified"),
    (_v4("0.0.0.0/8"), "this-network"),
    (_v4("127.0.0.0/8"), "loopback"),
    (_v4("10.0.0.0/8"), "private"),
    (_v4("172.16.0.0/12"), "private"),
    (_v4("192.168.0.0/16"), "private"),
    (_v4("100.64.0.0/10"), "shared address space"),
    (_v4("169.254.0.0/16"), "link-local"),
    (_v4("192.0.0.0/24"), "IETF protocol assignments"),
    (_v4("192.0.2.0/24"), "documentation"),
    (_v4("198.51.100.0/24"), "documentation"),
    (_v4("203.0.113.0/24"), "documentation"),
    (_v4("198.18.0.0/15"), "benchmarking"),
    (_v4("224.0.0.0/4"), "multicast"),
    (_v4("255.255.255.255/32"), "broadcast"),
    (_v4("240.0.0.0/4"), "reserved"),
)

_V6_RULES: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_v6("::/128"), "unspecified"),
    (_v6("::1/128"), "loopback"),
    (_v6("::ffff:0:0/96"), "IPv4-mapped"),
    (_v6("::/96"), "IPv4-compatible"),
    (_v6("64:ff9b:1::/48"), "local-use NAT64"),
    (_v6("100::/64"), "discard-only"),
    (_v6("2001::/32"), "Teredo"),
    (_v6("2001:db8::/32"), "documentation"),
    (_v6("fc00::/7"), "private"),
    (_v6("fe80::/10"), "link-local"),
    (_v6("fec0::/10"), "site-local"),
    (_v6("ff00::/8"), "multicast"),
)

_NAT64 = _v6("64:ff9b::/96")
_V4_COMPATIBLE = _v6("::/96")


def _v4_reason(ip: ipaddress.IPv4Address) -> str | None:
    for network, reason in _V4_RULES:
        if ip in network:
            return reason
    if not ip.is_global:
        return "non-global"
    return None


def _embedded_v4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address carries, and the name of the form that carries it."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "IPv4-mapped"
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64:
        return low32, "NAT64"
    if ip in _V4_COMPATIBLE and int(ip) > 1:
        return low32, "IPv4-compatible"
    if ip.sixtofour is not None:
        return ip.sixtofour, "6to4"
    if ip.teredo is not None:
        return ip.teredo[1], "Teredo"
    return None


def _v6_reason(ip: ipaddress.IPv6Address) -> str | None:
    embedded = _embedded_v4(ip)
    if embedded is not None:
        inner, form = embedded
        reason = _v4_reason(inner)
        if reason is not None:
            return f"{reason} (IPv4 address embedded via {form})"
        if form == "NAT64":
            # The well-known NAT64 prefix reaches the embedded, already checked, address.
            return None
    for network, reason in _V6_RULES:
        if ip in network:
            return reason
    if not ip.is_global:
        return "non-global"
    return None


def check_ip(ip: IPAddress) -> None:
    """Raise BlockedAddress unless ``ip`` is a public unicast address."""
    if isinstance(ip, ipaddress.IPv4Address):
        reason = _v4_reason(ip)
    else:
        reason = _v6_reason(ip)
    if reason is not None:
        raise BlockedAddress(reason, ip)


# Host names made only of these characters may be a numeric IPv4 form that inet_aton
# accepts ("2130706433", "0177.0.0.1", "0x7f.1", "127.1"); they are parsed without DNS.
_INET_ATON_CANDIDATE = re.compile(r"[0-9][0-9a-fA-FxX.]*")


def _bare_host(host: str) -> str:
    """``host`` without IPv6 brackets or a zone id ("[fe80::1%eth0]" -> "fe80::1")."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" in host:
        host = host.split("%", 1)[0]
    return host


def _literal(host: str) -> IPAddress | None:
    """The address ``host`` spells numerically, or None for a name to look up."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _INET_ATON_CANDIDATE.fullmatch(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` stands for, in resolver order, without duplicates.

    Numeric hosts are parsed here without DNS. Raises ``socket.gaierror`` when the name does
    not resolve.
    """
    bare = _bare_host(host)
    literal = _literal(bare)
    if literal is not None:
        return [literal]
    try:
        infos = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM)
    except UnicodeError as exc:
        raise socket.gaierror(socket.EAI_NONAME, "host name is not valid") from exc
    addresses: list[IPAddress] = []
    for family, _type, _proto, _canonname, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise socket.gaierror(socket.EAI_NONAME, "host name has no addresses")
    return addresses


def safe_addresses(host: str, port: int, allow_private: bool) -> list[IPAddress]:
    """Resolve ``host`` and, unless ``allow_private``, refuse it if ANY address is blocked.

    A name with one public and one private address is refused as a whole: the caller connects
    only to addresses returned from here.
    """
    addresses = resolve(host, port)
    if not allow_private:
        for address in addresses:
            check_ip(address)
    return addresses
