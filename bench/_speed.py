"""How fast this machine runs Python right now: a fixed CPU-bound loop, timed.

The same code's CPU per event has been seen to move by half again within an hour on the
shared 2-core machines the benchmarks run on (the hypervisor, not the code). This probe
does the kind of work the receiver does per event (an HMAC-SHA256 and a SHA-256 over a
1 KiB body, ``json.loads`` of it, a small dict built from header-like pairs), alone on an
idle machine before each run, so a slow run can be told from a slow machine.

The figure is the best of a few rounds, in microseconds per iteration: lower is faster,
taken on each CPU in turn. It is a snapshot: on the shared machines each CPU has been seen
to switch between ~12 and ~22 us from one second to the next.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time

ITERATIONS = 2000
ROUNDS = 5

_BODY = json.dumps({"id": "evt_" + "0" * 20, "data": {"note": "x" * 900}}).encode()
_KEY = b"speed-probe-secret"
_PAIRS = [(f"HTTP_X_HEADER_{i}", f"value-{i}") for i in range(16)]


def _once() -> int:
    n = 0
    for _ in range(ITERATIONS):
        sig = hmac.new(_KEY, _BODY, hashlib.sha256).hexdigest()
        digest = hashlib.sha256(_BODY).digest()
        doc = json.loads(_BODY)
        headers = {k[5:].replace("_", "-").lower(): v for k, v in _PAIRS}
        n += len(sig) + len(digest) + len(doc) + len(headers)
    return n


def probe_us() -> float:
    """Microseconds per iteration, best of ``ROUNDS`` rounds."""
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        _once()
        best = min(best, time.perf_counter() - start)
    return best * 1e6 / ITERATIONS


def probe_cpus() -> list[float]:
    """``probe_us`` on each CPU this process may run on, one after the other."""
    allowed = os.sched_getaffinity(0)
    out = []
    try:
        for cpu in sorted(allowed):
            os.sched_setaffinity(0, {cpu})
            out.append(probe_us())
    finally:
        os.sched_setaffinity(0, allowed)
    return out


def shown(values: list[float]) -> str:
    """Per-CPU figures as printed: ``12.22 / 21.06``."""
    return " / ".join(f"{v:.2f}" for v in values)
