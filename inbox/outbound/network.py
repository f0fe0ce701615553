"""The network backend under the HTTP client's pool: the SSRF guard decides where TCP goes.

httpcore opens every connection through ``NetworkBackend.connect_tcp(host, port)``. Ours
resolves ``host`` once, has the guard check every address (unless private destinations are
allowed), and connects to a checked address itself, so no second resolution of the name can
swap in another one (DNS rebinding). TLS is started by httpcore on that socket with the URL's
host name as SNI name and certificate name.

Each stream also honours the current attempt's deadline: httpcore bounds each read and write
on its own, ours bounds connect, send and read together.
"""

from __future__ import annotations

import contextvars
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpcore

from inbox.outbound import ssrf


@dataclass
class Attempt:
    """One delivery attempt: its deadline (time.monotonic), the connections it opened and the
    response bytes it received."""

    deadline: float
    opened: int = 0
    received: int = 0


# Set by the client for the length of one attempt; the pool calls the backend and its streams
# without a way to pass the attempt along.
ATTEMPT: contextvars.ContextVar[Attempt] = contextvars.ContextVar("outbound_attempt")


def _bounded(timeout: float | None, expired: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of the current attempt; ``expired`` once none is."""
    attempt = ATTEMPT.get(None)
    if attempt is None:
        return timeout
    remaining = attempt.deadline - time.monotonic()
    if remaining <= 0:
        raise expired("deadline exceeded")
    return remaining if timeout is None else min(timeout, remaining)


class GuardedBackend(httpcore.NetworkBackend):
    """Connects only to addresses ``ssrf.safe_addresses`` returned, trying each in turn.

    Raises ``ssrf.BlockedAddress`` or ``socket.gaierror`` before any connection is attempted;
    the pool passes either through unchanged.
    """

    def __init__(self, allow_private: bool) -> None:
        self.allow_private = allow_private
        self._sockets = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = ssrf.safe_addresses(host, port, self.allow_private)
        attempt = ATTEMPT.get(None)
        if attempt is not None:
            attempt.opened += 1
        failure: Exception = httpcore.ConnectError("no address to connect to")
        for ip in addresses:
            try:
                stream = self._sockets.connect_tcp(
                    str(ip),
                    port,
                    _bounded(timeout, httpcore.ConnectTimeout),
                    local_address,
                    socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc  # nothing was sent: the next checked address may be tried
                continue
            return DeadlineStream(stream)
        raise failure

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.UnsupportedProtocol("deliveries go over TCP only")


class DeadlineStream(httpcore.NetworkStream):
    """A stream whose reads, writes and TLS handshake end at the attempt's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))
        attempt = ATTEMPT.get(None)
        if attempt is not None:
            attempt.received += len(data)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)
