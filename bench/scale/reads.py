"""The scale benchmark's readers: the admin API and the console, as an operator uses them.

One client, one keep-alive connection, one request at a time (latency, not throughput):
an operator's page view is one request, and its p99 is what the target speaks of. The
API gets a bearer token; the console is signed into with the same token through its
form (the sign-in page's CSRF cookie repeated in the form, as a browser does), and
then sends the session cookie it was given.
"""

from __future__ import annotations

import http.client
import re
import time
import urllib.parse
from collections.abc import Callable
from http.cookies import SimpleCookie
from typing import Any

HOST = "127.0.0.1"
_CSRF = re.compile(rb'name="csrf" value="([^"]+)"')


class Client:
    """A keep-alive HTTP/1.1 connection with the cookies the server set."""

    def __init__(self, port: int, token: str | None = None) -> None:
        self.port = port
        self.token = token
        self.cookies: dict[str, str] = {}
        self.conn = http.client.HTTPConnection(HOST, port, timeout=30)

    def request(
        self, method: str, path: str, form: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        headers = {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            self.conn.request(method, path, body=body, headers=headers)
            resp = self.conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionError):
            # The server closes a keep-alive connection after its request budget
            # (WEB_KEEPALIVE_REQUESTS): reconnect and send it once more.
            self.conn.close()
            self.conn = http.client.HTTPConnection(HOST, self.port, timeout=30)
            self.conn.request(method, path, body=body, headers=headers)
            resp = self.conn.getresponse()
        data = resp.read()
        for value in resp.headers.get_all("Set-Cookie") or []:
            jar: SimpleCookie = SimpleCookie()
            jar.load(value)
            for name, morsel in jar.items():
                self.cookies[name] = morsel.value
        return resp.status, data

    def close(self) -> None:
        self.conn.close()


def console(port: int, token: str) -> Client:
    """A client signed into the console with ``token``."""
    client = Client(port)
    status, page = client.request("GET", "/ui/login")
    found = _CSRF.search(page)
    if status != 200 or found is None:
        raise RuntimeError(f"console sign-in page: {status}")
    status, _ = client.request("POST", "/ui/login", {"token": token, "csrf": found[1].decode()})
    if status != 302:
        raise RuntimeError(f"console sign-in refused: {status}")
    return client


def timed(client: Client, paths: Callable[[int], str], n: int, warmup: int) -> dict[str, Any]:
    """``n`` requests (after ``warmup`` unrecorded ones) to ``paths(i)``: latency figures
    in ms and the statuses; anything but a 200 is counted and shown."""
    for i in range(warmup):
        client.request("GET", paths(-1 - i))
    took: list[float] = []
    statuses: dict[str, int] = {}
    for i in range(n):
        start = time.perf_counter()
        status, _ = client.request("GET", paths(i))
        took.append((time.perf_counter() - start) * 1000)
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    took.sort()
    return {
        "requests": n,
        "p50_ms": _pct(took, 0.50),
        "p99_ms": _pct(took, 0.99),
        "max_ms": took[-1] if took else None,
        "statuses": dict(sorted(statuses.items())),
    }


def _pct(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile of sorted values."""
    if not values:
        return None
    rank = max(1, -(-len(values) * q // 1))  # ceil(n * q), at least 1
    return values[int(rank) - 1]


def measure(
    port: int, token: str, public_ids: list[str], tenant: str, n: int, warmup: int
) -> dict[str, dict[str, Any]]:
    """Each read an operator makes, API and console: the newest page of events, a page
    filtered to one tenant's dead letters, and one event in full (random, from
    ``public_ids``: across every day the ledger holds)."""
    if not public_ids:
        raise RuntimeError("no events to look up")

    def one(prefix: str) -> Callable[[int], str]:
        return lambda i: f"{prefix}/{public_ids[i % len(public_ids)]}"

    dead = urllib.parse.urlencode({"tenant": tenant, "state": "quarantined"})
    api = Client(port, token)
    ui = console(port, token)
    try:
        reads = {
            "api list": (api, lambda i: "/api/v1/events"),
            "api list, tenant's dead letters": (api, lambda i: f"/api/v1/events?{dead}"),
            "api one event": (api, one("/api/v1/events")),
            "console list": (ui, lambda i: "/ui/events"),
            "console list, tenant's dead letters": (ui, lambda i: f"/ui/events?{dead}"),
            "console one event": (ui, one("/ui/events")),
        }
        return {name: timed(c, path, n, warmup) for name, (c, path) in reads.items()}
    finally:
        api.close()
        ui.close()
