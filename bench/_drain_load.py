"""An open-loop sender: signed events at a fixed rate, whatever the receiver's speed.

Request i is due at ``start + i / rate``; a pool of threads with keep-alive connections
takes the requests in order and sends each at its due time (or at once when late, the
lateness being recorded), so a slow answer does not lower the offered rate.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import itertools
import json
import threading
import time
from collections import Counter
from typing import Any

from _drain_db import EVENT_TYPE


def signed(secret: str, body: bytes, key: str) -> dict[str, str]:
    ts = str(int(time.time()))
    sig = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Timestamp": ts,
        "X-Signature": sig,
        "Idempotency-Key": key,
    }


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


class _Sender:
    def __init__(self, port: int, path: str, secret: str, prefix: str) -> None:
        self.port, self.path, self.secret, self.prefix = port, path, secret, prefix
        self.lock = threading.Lock()
        self.statuses: Counter[int] = Counter()
        self.latencies: list[float] = []
        self.lateness: list[float] = []

    def send(self, conn: http.client.HTTPConnection | None, i: int, late: float):  # type: ignore[no-untyped-def]
        body = json.dumps({"type": EVENT_TYPE, "seq": i}, separators=(",", ":")).encode()
        headers = signed(self.secret, body, f"{self.prefix}-{i}")
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        t = time.perf_counter()
        try:
            conn.request("POST", self.path, body=body, headers=headers)
            resp = conn.getresponse()
            resp.read()
            status = resp.status
        except (OSError, http.client.HTTPException):
            conn.close()
            conn, status = None, 0
        took = time.perf_counter() - t
        with self.lock:
            self.statuses[status] += 1
            self.latencies.append(took)
            self.lateness.append(late)
        return conn


def paced(
    port: int,
    path: str,
    secret: str,
    rate: float,
    seconds: float,
    prefix: str,
    threads: int = 16,
) -> dict[str, Any]:
    """Send ``rate * seconds`` events; returns statuses and client-side timings."""
    total = int(rate * seconds)
    sender = _Sender(port, path, secret, prefix)
    order = itertools.count()
    start = time.perf_counter() + 0.2

    def loop() -> None:
        conn = None
        while (i := next(order)) < total:
            due = start + i / rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            conn = sender.send(conn, i, max(0.0, time.perf_counter() - due))
        if conn is not None:
            conn.close()

    pool = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    lat = sorted(sender.latencies)
    late = sorted(sender.lateness)
    return {
        "sent": total,
        "seconds": round(elapsed, 3),
        "offered_per_s": round(total / elapsed, 1),
        "statuses": {str(k): v for k, v in sorted(sender.statuses.items())},
        "http_p50_ms": round(_percentile(lat, 0.5) * 1000, 2),
        "http_p99_ms": round(_percentile(lat, 0.99) * 1000, 2),
        "http_max_ms": round((lat[-1] if lat else float("nan")) * 1000, 2),
        "send_lateness_p99_ms": round(_percentile(late, 0.99) * 1000, 2),
    }
