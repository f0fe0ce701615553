"""HTTP client that delivers signed outbound webhooks to tenants' endpoints.

Every request goes to an address that passed the SSRF guard: the host is resolved once, each
address is checked (unless private destinations are allowed), and the socket is opened to that
checked address, never to a second resolution of the name. The Host header, and for https the
SNI name and certificate check, use the host name from the URL.

Redirects are not followed. Connect, send and read together are bounded by ``timeout``; name
resolution goes through the system resolver, which has no timeout of its own. One connection per
(scheme, host, port, address) is kept open for the next delivery to the same endpoint. A
``Client`` is meant for one thread at a time.
"""

from __future__ import annotations

import contextvars
import http.client
import io
import ipaddress
import math
import re
import socket
import ssl
import string
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from inbox.outbound import ssrf

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

EXCERPT_LIMIT = 1024  # bytes of the response body kept in Response.body_excerpt
DRAIN_LIMIT = 64 * 1024  # bytes read, at most, so that a connection can be reused
MAX_POOLED = 16  # open connections kept per Client
MAX_URL_LENGTH = 8192

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Response:
    """What the endpoint answered. ``headers`` has lower-case names; repeated headers are joined
    with ", ". ``body_excerpt`` is at most the first 1024 bytes of the body."""

    status: int
    headers: dict[str, str]
    body_excerpt: bytes
    latency_ms: float


class DeliveryError(Exception):
    """A delivery attempt failed before a response was received. ``kind`` classifies it."""

    kind: str = "error"


class Blocked(DeliveryError):
    """The destination resolves to an address the SSRF guard refuses."""

    kind = "blocked"


class ConnectError(DeliveryError):
    """The connection was refused, reset or unreachable, or TLS failed."""

    kind = "connect"


class ProtocolError(ConnectError):
    """The endpoint's reply was not a valid HTTP/1.x response (kind stays "connect")."""


class DNSError(DeliveryError):
    """The host name did not resolve."""

    kind = "dns"


class Timeout(DeliveryError):
    """No complete response header within the timeout."""

    kind = "timeout"


class InvalidURL(DeliveryError):
    """The URL cannot be delivered to: not http/https, no host, user information, bad port."""

    kind = "invalid_url"


# ---------------------------------------------------------------------------------------------
# URL and header checks


@dataclass(frozen=True)
class _Target:
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


def _parse_url(url: str) -> _Target:
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
    return _Target(scheme, host, port, path, host_header)


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Set by the client itself; a caller's value for these is ignored.
_MANAGED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


def _request_headers(headers: Mapping[str, str], target: _Target, length: int) -> dict[str, str]:
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


# ---------------------------------------------------------------------------------------------
# Connections pinned to a checked address, with a deadline on every read


@dataclass
class _Progress:
    """One attempt's deadline (time.monotonic) and the response bytes received so far."""

    deadline: float
    received: int = 0


# http.client builds the response object itself and hands it only the socket; the current
# attempt's deadline and byte counter reach it through this variable.
_PROGRESS: contextvars.ContextVar[_Progress] = contextvars.ContextVar("outbound_http_progress")


def _remaining(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("deadline exceeded")
    return remaining


class _DeadlineReader(io.RawIOBase):
    """Socket reads that each wait at most until the attempt's deadline and count bytes."""

    def __init__(self, sock: socket.socket, progress: _Progress) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)
        self._progress = progress

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int | None:
        self._sock.settimeout(_remaining(self._progress.deadline))
        count = self._raw.readinto(buffer)
        if count:
            self._progress.received += count
        return count

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _BoundedResponse(http.client.HTTPResponse):
    """An HTTPResponse whose reads honour the current attempt's deadline."""

    def __init__(
        self,
        sock: socket.socket,
        debuglevel: int = 0,
        method: str | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(sock, debuglevel, method, url)
        progress = _PROGRESS.get(None)
        if progress is not None:
            unbounded = self.fp
            self.fp = io.BufferedReader(_DeadlineReader(sock, progress))
            unbounded.close()


def _open_socket(ip: ssrf.IPAddress, port: int, timeout: float | None) -> socket.socket:
    sock = socket.create_connection((str(ip), port), timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        sock.close()
        raise
    return sock


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Plain HTTP to ``host`` that connects to the already checked address ``ip``."""

    response_class = _BoundedResponse

    def __init__(self, host: str, port: int, ip: ssrf.IPAddress, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.pinned_ip = ip

    def connect(self) -> None:
        self.sock = _open_socket(self.pinned_ip, self.port, self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to ``host`` over a socket to the checked address ``ip``; the certificate is verified
    against ``host``, which is also the SNI name."""

    response_class = _BoundedResponse

    def __init__(
        self, host: str, port: int, ip: ssrf.IPAddress, timeout: float, context: ssl.SSLContext
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self.pinned_ip = ip
        self.tls_context = context

    def connect(self) -> None:
        sock = _open_socket(self.pinned_ip, self.port, self.timeout)
        try:
            self.sock = self.tls_context.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


# ---------------------------------------------------------------------------------------------
# Errors


class _ConnectFailed(Exception):
    """Opening the connection failed: nothing was sent, the next address may be tried."""

    def __init__(self, error: DeliveryError) -> None:
        super().__init__(str(error))
        self.error = error


class _StaleConnection(Exception):
    """A reused connection was found closed before any response byte arrived."""


# Errors after which a request on a reused connection is retried on a fresh one (when no
# response byte was received); http.client.RemoteDisconnected is a ConnectionResetError.
_STALE_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


def _detail(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:200]


def _translate(exc: BaseException) -> DeliveryError:
    """The DeliveryError for a lower-level exception, with the exception as its cause."""
    error: DeliveryError
    if isinstance(exc, ssrf.BlockedAddress):
        error = Blocked(str(exc))
    elif isinstance(exc, socket.gaierror):
        error = DNSError(f"could not resolve host: {_detail(exc)}")
    elif isinstance(exc, TimeoutError):
        error = Timeout("no response within the timeout")
    elif isinstance(exc, OSError):
        error = ConnectError(f"connection failed: {_detail(exc)}")
    elif isinstance(exc, http.client.HTTPException):
        error = ProtocolError(f"invalid HTTP response: {type(exc).__name__}: {_detail(exc)}")
    else:
        error = ConnectError(f"delivery failed: {type(exc).__name__}")
    error.__cause__ = exc
    return error


# ---------------------------------------------------------------------------------------------
# Responses


def _read_excerpt(response: http.client.HTTPResponse) -> tuple[bytes, bool]:
    """The first EXCERPT_LIMIT body bytes, and whether the whole body was read (after draining
    at most DRAIN_LIMIT bytes). A failure while reading the body ends the read early: the status
    already received is still the endpoint's answer."""
    excerpt = bytearray()
    try:
        while len(excerpt) < EXCERPT_LIMIT:
            chunk = response.read(EXCERPT_LIMIT - len(excerpt))
            if not chunk:
                break
            excerpt += chunk
        drained = len(excerpt)
        while not response.isclosed() and drained < DRAIN_LIMIT:
            chunk = response.read(min(16384, DRAIN_LIMIT - drained))
            if not chunk:
                break
            drained += len(chunk)
    except (OSError, http.client.HTTPException):
        return bytes(excerpt), False
    return bytes(excerpt), response.isclosed()


def _header_dict(response: http.client.HTTPResponse) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in response.getheaders():
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


# ---------------------------------------------------------------------------------------------
# Client

_PoolKey: TypeAlias = tuple[str, str, int, ssrf.IPAddress]


class Client:
    """Delivers POST requests; see the module docstring for the guarantees."""

    def __init__(
        self,
        timeout: float = 5.0,
        allow_private: bool = False,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if not (timeout > 0 and math.isfinite(timeout)):
            raise ValueError("timeout must be a positive number of seconds")
        self.timeout = timeout
        self.allow_private = allow_private
        self._ssl_context = ssl_context
        self._pool: dict[_PoolKey, http.client.HTTPConnection] = {}

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every kept-open connection."""
        pool, self._pool = self._pool, {}
        for connection in pool.values():
            connection.close()

    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Response:
        """POST ``body`` to ``url`` and return the response, whatever its status.

        Raises InvalidURL, Blocked, DNSError, ConnectError or Timeout (all DeliveryError), and
        ValueError for a header that cannot be sent.
        """
        target = _parse_url(url)
        request_headers = _request_headers(headers, target, len(body))
        start = time.monotonic()
        deadline = start + self.timeout
        try:
            addresses = ssrf.safe_addresses(target.host, target.port, self.allow_private)
        except ssrf.BlockedAddress as exc:
            raise Blocked(str(exc)) from exc
        except (OSError, UnicodeError) as exc:
            raise DNSError(f"could not resolve host: {_detail(exc)}") from exc
        failure: DeliveryError = Timeout("no response within the timeout")
        for ip in addresses:
            try:
                return self._deliver(target, ip, body, request_headers, start, deadline)
            except _ConnectFailed as exc:
                failure = exc.error
        raise failure

    def _deliver(
        self,
        target: _Target,
        ip: ssrf.IPAddress,
        body: bytes,
        headers: dict[str, str],
        start: float,
        deadline: float,
    ) -> Response:
        key: _PoolKey = (target.scheme, target.host, target.port, ip)
        pooled = self._pool.pop(key, None)
        if pooled is not None:
            try:
                return self._exchange(pooled, key, target, body, headers, start, deadline)
            except _StaleConnection:
                pass  # the endpoint closed the idle connection: one retry on a fresh one
        connection = self._new_connection(target, ip)
        try:
            connection.timeout = _remaining(deadline)
            connection.connect()
        except OSError as exc:
            connection.close()
            raise _ConnectFailed(_translate(exc)) from exc
        return self._exchange(connection, key, target, body, headers, start, deadline, fresh=True)

    def _new_connection(self, target: _Target, ip: ssrf.IPAddress) -> http.client.HTTPConnection:
        if target.scheme == "https":
            if self._ssl_context is None:
                self._ssl_context = ssl.create_default_context()
            return _PinnedHTTPSConnection(
                target.host, target.port, ip, self.timeout, self._ssl_context
            )
        return _PinnedHTTPConnection(target.host, target.port, ip, self.timeout)

    def _exchange(
        self,
        connection: http.client.HTTPConnection,
        key: _PoolKey,
        target: _Target,
        body: bytes,
        headers: dict[str, str],
        start: float,
        deadline: float,
        *,
        fresh: bool = False,
    ) -> Response:
        """Send the request on an open connection and read the response."""
        progress = _Progress(deadline)
        token = _PROGRESS.set(progress)
        try:
            try:
                connection.sock.settimeout(_remaining(deadline))
                connection.request("POST", target.path, body=body, headers=headers)
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                if not fresh and progress.received == 0 and isinstance(exc, _STALE_ERRORS):
                    raise _StaleConnection from exc
                raise _translate(exc) from exc
            excerpt, complete = _read_excerpt(response)
        except BaseException:
            connection.close()
            raise
        finally:
            _PROGRESS.reset(token)
        latency_ms = (time.monotonic() - start) * 1000.0
        if complete and not response.will_close and connection.sock is not None:
            self._keep(key, connection)
        else:
            response.close()
            connection.close()
        return Response(response.status, _header_dict(response), excerpt, latency_ms)

    def _keep(self, key: _PoolKey, connection: http.client.HTTPConnection) -> None:
        self._pool[key] = connection
        while len(self._pool) > MAX_POOLED:
            oldest = next(iter(self._pool))
            self._pool.pop(oldest).close()
