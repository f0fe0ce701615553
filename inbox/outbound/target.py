"""Where a delivery goes and what it sends: the URL and header checks made before connecting.

Written here rather than left to the HTTP library because the rules are ours: only http/https,
no user information, a host that is a name or an address literal (numeric forms are judged by
the SSRF guard, not resolved), and error messages that never repeat the URL, which may hold a
tenant's secret.
"""

from __future__ import annotations

import ipaddress
import re
import string
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from inbox.outbound.errors import InvalidURL

MAX_URL_LENGTH = 8192

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # lower-case ASCII name or address literal; IPv6 without brackets or zone id
    port: int
    path: str  # path and query, as sent in the request line
    host_header: str


_HOST_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?")
# Every printable ASCII character stays as it is; only non-ASCII text gets percent-encoded.
_PRINTABLE_ASCII = string.punctuation + string.ascii_letters + string.digits


def _checked_host(hostname: str) -> str:
    if ":" in hostname:
        try:
            address = ipaddress.ip_address(hostname.split("%", 1)[0])
        except ValueError:
            raise InvalidURL("URL host is not a valid IPv6 address") from None
        return str(address)
    if not hostname.isascii():
        try:
            hostname = hostname.encode("idna").decode("ascii")
        except UnicodeError:
            raise InvalidURL("URL host is not a valid internationalized name") from None
    if len(hostname) > 253 or not _HOST_NAME.fullmatch(hostname):
        raise InvalidURL("URL host is not a valid host name")
    return hostname


def parse_url(url: str) -> Target:
    """The delivery target of ``url``. Messages never repeat the URL, which may hold secrets."""
    if not url or len(url) > MAX_URL_LENGTH:
        raise InvalidURL("URL is empty or too long")
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        raise InvalidURL("URL contains whitespace or control characters")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidURL("URL is malformed or has an invalid port") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise InvalidURL("URL scheme must be http or https")
    if "@" in parts.netloc:
        raise InvalidURL("URL must not contain user information")
    if not parts.hostname:
        raise InvalidURL("URL has no host")
    if port == 0:
        raise InvalidURL("URL port must be between 1 and 65535")
    host = _checked_host(parts.hostname)
    default_port = _DEFAULT_PORTS[scheme]
    port = default_port if port is None else port
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    path = urllib.parse.quote(path, safe=_PRINTABLE_ASCII)
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default_port else f"{shown}:{port}"
    return Target(scheme, host, port, path, host_header)


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Set by the client itself; a caller's value for these is ignored.
_MANAGED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


def request_headers(headers: Mapping[str, str], target: Target, length: int) -> dict[str, str]:
    """The headers to send. Raises ValueError (naming the header, never its value) for a name
    or value that cannot be sent."""
    prepared = {"Host": target.host_header}
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"invalid header name: {name!r}")
        if any(c in value for c in "\r\n\0") or not _is_latin1(value):
            raise ValueError(f"invalid value for header {name}")
        if name.lower() not in _MANAGED_HEADERS:
            prepared[name] = value
    prepared["Content-Length"] = str(length)
    return prepared


def _is_latin1(value: str) -> bool:
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True
