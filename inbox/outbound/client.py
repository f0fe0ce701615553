"""HTTP client that delivers signed outbound webhooks to tenants' endpoints.

httpcore does the HTTP/1.1 and the connection pool; ``network.GuardedBackend`` under it opens
every connection to an address the SSRF guard checked, never to a second resolution of the
name. The Host header, and for https the SNI name and certificate check, use the URL's host.

httpcore, not httpx: httpx would also read proxy settings from the environment, and a proxy
would connect to the name itself, past the guard. Redirects are not followed. Connect, send and
read together are bounded by ``timeout``; name resolution goes through the system resolver,
which has no timeout of its own. Idle connections are kept per endpoint (scheme, host, port)
for the next delivery, up to MAX_POOLED. A ``Client`` is meant for one thread at a time;
``PerThread`` keeps one per thread across a courier's tasks, so a busy endpoint's
connection is reused rather than opened per task (every new connection still passes the
guard).
"""

from __future__ import annotations

import functools
import math
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpcore

from inbox.outbound import ssrf
from inbox.outbound.errors import (
    Blocked,
    ConnectError,
    DeliveryError,
    DNSError,
    InvalidURL,
    ProtocolError,
    Timeout,
)
from inbox.outbound.network import ATTEMPT, Attempt, GuardedBackend
from inbox.outbound.target import Target, parse_url, request_headers

__all__ = [
    "Blocked",
    "Client",
    "ConnectError",
    "DNSError",
    "DeliveryError",
    "InvalidURL",
    "PerThread",
    "ProtocolError",
    "Response",
    "Timeout",
]

EXCERPT_LIMIT = 1024  # bytes of the response body kept in Response.body_excerpt
DRAIN_LIMIT = 64 * 1024  # bytes read, at most, so that a connection can be reused
MAX_POOLED = 16  # idle connections kept per Client


@dataclass(frozen=True)
class Response:
    """What the endpoint answered. ``headers`` has lower-case names; repeated headers are joined
    with ", ". ``body_excerpt`` is at most the first 1024 bytes of the body."""

    status: int
    headers: dict[str, str]
    body_excerpt: bytes
    latency_ms: float


@functools.cache
def _system_trust() -> ssl.SSLContext:
    """The system's CA store, loaded once per process (a context is safe to share)."""
    return ssl.create_default_context()


# What a failed exchange can raise: the guard's refusal, the resolver's error, httpcore's.
_FAILURES = (
    ssrf.BlockedAddress,
    OSError,
    UnicodeError,
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
)
# Raised when a kept connection turns out closed; retried once on a fresh connection when the
# attempt opened none and received no response byte (nothing of the answer can be lost).
_STALE = (httpcore.ReadError, httpcore.WriteError, httpcore.RemoteProtocolError)


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
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context or _system_trust(),
            max_connections=None,
            max_keepalive_connections=MAX_POOLED,
            retries=0,
            network_backend=GuardedBackend(allow_private),
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every kept-open connection."""
        self._pool.close()

    def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float | None = None
    ) -> Response:
        """POST ``body`` to ``url`` and return the response, whatever its status, within
        ``timeout`` seconds (the client's own when None).

        Raises InvalidURL, Blocked, DNSError, ConnectError or Timeout (all DeliveryError), and
        ValueError for a header that cannot be sent.
        """
        limit = self.timeout if timeout is None else timeout
        if not (limit > 0 and math.isfinite(limit)):
            raise ValueError("timeout must be a positive number of seconds")
        target = parse_url(url)
        sent_headers = request_headers(headers, target, len(body))
        start = time.monotonic()
        attempt = Attempt(deadline=start + limit)
        token = ATTEMPT.set(attempt)
        try:
            try:
                return self._exchange(target, body, sent_headers, start, limit)
            except _STALE:
                if attempt.opened or attempt.received:
                    raise
            attempt.received = 0
            return self._exchange(target, body, sent_headers, start, limit)
        except _FAILURES as exc:
            error = _translate(exc)
            raise error from error.__cause__
        finally:
            ATTEMPT.reset(token)

    def _exchange(
        self, target: Target, body: bytes, headers: dict[str, str], start: float, limit: float
    ) -> Response:
        url = httpcore.URL(
            scheme=target.scheme.encode("ascii"),
            host=target.host.encode("ascii"),
            port=target.port,
            target=target.path.encode("ascii"),
        )
        wire_headers = [(k.encode("ascii"), v.encode("latin-1")) for k, v in headers.items()]
        timeouts = dict.fromkeys(("connect", "read", "write", "pool"), limit)
        with self._pool.stream(
            "POST", url, headers=wire_headers, content=body, extensions={"timeout": timeouts}
        ) as response:
            excerpt = _read_excerpt(response)
        latency_ms = (time.monotonic() - start) * 1000.0
        return Response(response.status, _header_dict(response), excerpt, latency_ms)


class PerThread:
    """One ``Client`` per thread, made on the thread's first use and kept across its tasks;
    ``close`` closes them all (their idle connections), as the worker shuts down."""

    def __init__(self, allow_private: bool = False) -> None:
        self.allow_private = allow_private
        self._local = threading.local()
        self._made: list[Client] = []
        self._lock = threading.Lock()

    def get(self) -> Client:
        """This thread's client."""
        client: Client | None = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = Client(allow_private=self.allow_private)
            with self._lock:
                self._made.append(client)
        return client

    def close(self) -> None:
        """Close every thread's client; a thread that uses it again gets a new one."""
        with self._lock:
            made, self._made = self._made, []
        self._local = threading.local()
        for client in made:
            client.close()


def _read_excerpt(response: httpcore.Response) -> bytes:
    """The first EXCERPT_LIMIT body bytes, after draining at most DRAIN_LIMIT bytes.

    The pool keeps the connection only if the body was read to its end. A failure while reading
    the body ends the read early: the status already received is still the endpoint's answer.
    """
    excerpt = bytearray()
    drained = 0
    try:
        for chunk in response.iter_stream():
            if len(excerpt) < EXCERPT_LIMIT:
                excerpt += chunk[: EXCERPT_LIMIT - len(excerpt)]
            drained += len(chunk)
            if drained > DRAIN_LIMIT:
                break
    except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError):
        pass
    return bytes(excerpt)


def _header_dict(response: httpcore.Response) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw_name, raw_value in response.headers:
        key, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def _detail(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:200]


def _translate(exc: BaseException) -> DeliveryError:
    """The DeliveryError for a lower-level failure, caused by the lowest error known."""
    # httpcore raises its errors as ``ItsError(original)`` and the pool drops the chain, so
    # the socket's or TLS's own error is the first argument.
    root = exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else exc
    error: DeliveryError
    if isinstance(exc, ssrf.BlockedAddress):
        error = Blocked(str(exc))
    elif isinstance(exc, socket.gaierror | UnicodeError):
        error = DNSError(f"could not resolve host: {_detail(exc)}")
    elif isinstance(exc, httpcore.TimeoutException | TimeoutError):
        error = Timeout("no response within the timeout")
    elif isinstance(exc, httpcore.ProtocolError):
        error = ProtocolError(f"invalid HTTP response: {type(exc).__name__}: {_detail(exc)}")
    else:
        error = ConnectError(f"connection failed: {_detail(root)}")
    error.__cause__ = root
    return error
