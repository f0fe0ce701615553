"""The load generator: signed 1 KiB JSON webhooks from many senders, timed per request.

One *level* is N concurrent senders spread over a few OS processes (so the client is not
held back by one interpreter lock); each sender is a thread with its own persistent
keep-alive ``http.client.HTTPConnection``. Every sender sends one request at a time, as
fast as the receiver answers (a closed loop), first during a warm-up (not recorded) and
then during the measured window.

Every event carries a unique ``Idempotency-Key`` (also its ``id`` in the body) and is
signed with the ``hmac`` scheme: ``X-Signature`` = hex HMAC-SHA256 over
``{X-Timestamp}.{body}``. Signing one 1 KiB body costs a few microseconds, so it is done
per request, which keeps the timestamp fresh however long a run takes.

All clocks are ``time.monotonic()``, which is system-wide on Linux, so the parent can hand
the same start / measure / end instants to every process.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import math
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

BODY_BYTES = 1024
# Short GIL switch interval in the client processes: a sender whose answer has arrived
# should not wait 5 ms (the default) for another sender to yield the interpreter.
CLIENT_SWITCH_INTERVAL = 0.0005


@dataclass(frozen=True)
class Spec:
    """What one load process does."""

    host: str
    port: int
    path: str
    secret: bytes
    threads: int
    tag: str  # makes Idempotency-Keys unique across runs, levels and processes
    t_start: float  # monotonic: senders connect and start the warm-up
    t_measure: float  # monotonic: the measured window opens
    t_end: float  # monotonic: no request starts at or after this instant
    body_bytes: int = BODY_BYTES


@dataclass
class Tally:
    """Counts from one sender thread or one process (merged)."""

    window_latencies: list[float] = field(default_factory=list)  # seconds, 2xx only
    window_statuses: Counter[int] = field(default_factory=Counter)  # 0: transport error
    total_statuses: Counter[int] = field(default_factory=Counter)  # warm-up included

    def merge(self, other: Tally) -> None:
        self.window_latencies.extend(other.window_latencies)
        self.window_statuses.update(other.window_statuses)
        self.total_statuses.update(other.total_statuses)


def make_body(key: str, size: int = BODY_BYTES) -> bytes:
    """A JSON object of exactly ``size`` bytes whose ``id`` is ``key``."""
    head = '{"id":"' + key + '","type":"bench.event","data":{"pad":"'
    tail = '"}}'
    pad = size - len(head) - len(tail)
    if pad < 0:
        raise ValueError("key too long for the body size")
    return (head + "x" * pad + tail).encode()


def sign(secret: bytes, body: bytes, ts: int) -> dict[str, str]:
    ts_text = str(ts)
    sig = hmac.new(secret, ts_text.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"Content-Type": "application/json", "X-Timestamp": ts_text, "X-Signature": sig}


def _sleep_until(instant: float) -> None:
    delay = instant - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _send_one(conn: http.client.HTTPConnection, path: str, body: bytes, headers: dict) -> int:
    """One request on a kept-alive connection; the status, or 0 on a transport error."""
    try:
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, http.client.HTTPException):
        conn.close()  # the next request reconnects
        return 0


def _sender(spec: Spec, index: int, out: Tally) -> None:
    conn = http.client.HTTPConnection(spec.host, spec.port, timeout=30)
    prefix = f"{spec.tag}-{index}-"
    seq = 0
    monotonic = time.monotonic
    lat = out.window_latencies
    window = out.window_statuses
    total = out.total_statuses
    _sleep_until(spec.t_start)
    try:
        while True:
            started = monotonic()
            if started >= spec.t_end:
                break
            seq += 1
            key = prefix + str(seq)
            body = make_body(key, spec.body_bytes)
            headers = sign(spec.secret, body, int(time.time()))
            headers["Idempotency-Key"] = key
            status = _send_one(conn, spec.path, body, headers)
            finished = monotonic()
            total[status] += 1
            if started >= spec.t_measure and finished <= spec.t_end:
                window[status] += 1
                if 200 <= status < 300:
                    lat.append(finished - started)
            if status == 0:
                time.sleep(0.01)  # do not spin on a refused connection
    finally:
        conn.close()


def run_process(spec: Spec) -> Tally:
    """Entry point of one load process: ``spec.threads`` senders, merged counts."""
    sys.setswitchinterval(CLIENT_SWITCH_INTERVAL)
    tallies = [Tally() for _ in range(spec.threads)]
    threads = [
        threading.Thread(target=_sender, args=(spec, i, tallies[i]), daemon=True)
        for i in range(spec.threads)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    merged = Tally()
    for tally in tallies:
        merged.merge(tally)
    return merged


def split(senders: int, procs: int) -> list[int]:
    """Senders per process, as even as possible; never an empty process."""
    procs = max(1, min(procs, senders))
    base, extra = divmod(senders, procs)
    return [base + (1 if i < extra else 0) for i in range(procs)]


def default_procs(senders: int) -> int:
    """About 8 senders per load process, at most 8 processes."""
    return max(1, min(8, math.ceil(senders / 8)))


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in 0..100); NaN when empty."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(frozen=True)
class Level:
    """One level of load, whichever generator drives it."""

    host: str
    port: int
    path: str
    secret: bytes
    senders: int
    seconds: float  # the measured window
    warmup: float  # unrecorded, before the window
    tag: str  # makes Idempotency-Keys unique across runs, levels and processes


def run_level(
    level: Level, procs: int | None = None, probe: Callable[[], Any] | None = None
) -> dict[str, Any]:
    """Drive one receiver with ``senders`` concurrent senders; the level's figures.

    ``probe``, when given, is called when the measured window opens and when it closes;
    its two results are returned under ``"probe"``.
    """
    counts = split(level.senders, procs or default_procs(level.senders))
    ctx = get_context("fork")
    probed: list[Any] = []
    with ctx.Pool(len(counts)) as pool:
        # Slack for the pool's processes to start before the common start instant.
        t_start = time.monotonic() + 0.5
        t_measure = t_start + level.warmup
        t_end = t_measure + level.seconds
        specs = [
            Spec(
                level.host,
                level.port,
                level.path,
                level.secret,
                n,
                f"{level.tag}-p{i}",
                t_start,
                t_measure,
                t_end,
            )
            for i, n in enumerate(counts)
        ]
        watcher = None
        if probe is not None:
            watcher = threading.Thread(
                target=_watch, args=(probe, t_measure, t_end, probed), daemon=True
            )
            watcher.start()
        tallies = pool.map(run_process, specs, chunksize=1)
        if watcher is not None:
            watcher.join()
    merged = Tally()
    for tally in tallies:
        merged.merge(tally)
    lat = sorted(merged.window_latencies)
    accepted = len(lat)
    errors = sum(n for status, n in merged.window_statuses.items() if not 200 <= status < 300)
    return {
        "senders": level.senders,
        "load_processes": len(counts),
        "seconds": level.seconds,
        "warmup_seconds": level.warmup,
        "accepted": accepted,
        "accepted_per_s": accepted / level.seconds,
        "p50_ms": percentile(lat, 50) * 1000,
        "p90_ms": percentile(lat, 90) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "max_ms": (lat[-1] * 1000) if lat else math.nan,
        "errors": errors,
        "window_statuses": {str(k): v for k, v in sorted(merged.window_statuses.items())},
        "total_statuses": {str(k): v for k, v in sorted(merged.total_statuses.items())},
        "probe": probed if len(probed) == 2 else None,
    }


def _watch(probe: Callable[[], Any], t_measure: float, t_end: float, out: list[Any]) -> None:
    _sleep_until(t_measure)
    out.append(probe())
    _sleep_until(t_end)
    out.append(probe())
