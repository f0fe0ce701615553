"""The open-loop sender, and what became of a level's events, read from the database."""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench.common.load import signed
from bench.pipeline.playbook import COPY_EVERY, EVENT_TYPE, SECRET, SOURCE, TENANT
from bench.pipeline.stack import Stack


def body_of(level: str, seq: int) -> bytes:
    doc = {"type": EVENT_TYPE, "level": level, "seq": seq, "data": {"account": f"acct-{seq}"}}
    return json.dumps(doc, separators=(",", ":")).encode()


# Each level's events are told apart by when they were received: bodies are sealed at rest
# (INBOX_ENCRYPT_PAYLOADS, on by default, as deployed), so nothing in a stored event's
# clear columns says its level. Every send widens its level's window to the moments just
# before it went out and just after its answer; levels run one after another.
WINDOWS: dict[str, tuple[datetime, datetime]] = {}
_WINDOWS_LOCK = threading.Lock()


def _widen(level: str, before: datetime, after: datetime) -> None:
    with _WINDOWS_LOCK:
        t0, t1 = WINDOWS.get(level, (before, after))
        WINDOWS[level] = (min(t0, before), max(t1, after))


def window(level: str) -> dict[str, datetime]:
    """The level's receipt window, as the parameters of ``LEVEL``."""
    t0, t1 = WINDOWS[level]
    return {"t0": t0, "t1": t1}


class Sender:
    """Open loop: request i is due at ``start + i / rate``, sent by one of 64 threads on
    keep-alive connections, the web processes in turn. Request i carries key i, except
    every ``COPY_EVERY``-th, which repeats key i - 5 with the same bytes. ``retry``: a
    refused request (5xx, a reset) is sent again after a second, up to 30 times."""

    def __init__(self, stack: Stack, retry: bool = False) -> None:
        self.ports = itertools.cycle([port for _, port in stack.web_procs])
        self.path = f"/hooks/{TENANT}/{SOURCE}"
        self.retry = retry
        self.local = threading.local()
        self.lock = threading.Lock()
        self.statuses: Counter[int] = Counter()  # final answers
        self.refused = 0  # answers that were retried
        # 429s and 503s that came without Retry-After: a refusal a provider cannot pace
        # itself by (every one the receiver sheds must say when to come back).
        self.without_retry_after = 0
        self.errors: Counter[str] = Counter()  # requests with no answer (status 0), by cause
        self.accepted: set[int] = set()  # seqs with a 2xx

    def _post(self, port: int, body: bytes, key: str) -> int:
        conns = self.local.__dict__.setdefault("conns", {})
        conn = conns.get(port) or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("POST", self.path, body=body, headers=signed(SECRET, body, key))
            resp = conn.getresponse()
            resp.read()
            conns[port] = conn
            if resp.status in (429, 503) and resp.getheader("Retry-After") is None:
                with self.lock:
                    self.without_retry_after += 1
            return resp.status
        except (OSError, http.client.HTTPException) as exc:
            with self.lock:
                self.errors[type(exc).__name__] += 1
            conn.close()
            conns.pop(port, None)
            return 0

    def send(self, level: str, i: int) -> int:
        """Request ``i`` of ``level``; its final status (0: no answer)."""
        seq = i - 5 if i % COPY_EVERY == COPY_EVERY - 1 and i >= 5 else i
        body, key = body_of(level, seq), f"{level}-{seq}"
        with self.lock:
            port = next(self.ports)
        before = datetime.now(UTC)
        for _ in range(30 if self.retry else 1):
            status = self._post(port, body, key)
            if 200 <= status < 300 or not self.retry or 400 <= status < 500:
                break
            with self.lock:
                self.refused += 1
            time.sleep(1.0)
        _widen(level, before, datetime.now(UTC))
        with self.lock:
            self.statuses[status] += 1
            if 200 <= status < 300:
                self.accepted.add(seq)
        return status

    def run(
        self, level: str, rate: float, seconds: float, stop: threading.Event | None = None
    ) -> float:
        """Sends ``rate * seconds`` requests; the achieved offered rate."""
        total, start = int(rate * seconds), time.perf_counter() + 0.2
        sent = 0
        with ThreadPoolExecutor(64) as pool:
            for i in range(total):
                if stop is not None and stop.is_set():
                    break
                time.sleep(max(0.0, start + i / rate - time.perf_counter()))
                pool.submit(self.send, level, i)
                sent += 1
        return sent / max(time.perf_counter() - start, 1e-9)


# -- reading the outcome from the database -------------------------------------------------

LEVEL = "e.received_at BETWEEN %(t0)s AND %(t1)s"


def quantiles(conn: psycopg.Connection[Any], sql: str, level: str) -> dict[str, float | None]:
    row = conn.execute(
        f"SELECT percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY ms), max(ms)"
        f" FROM ({sql}) t",
        window(level),
    ).fetchone()
    assert row is not None
    qs = row[0] or [None, None, None]
    return {"p50": qs[0], "p90": qs[1], "p99": qs[2], "max": row[1]}


def outcome(stack: Stack, level: str, sender: Sender, deadline_s: float = 120) -> dict[str, Any]:
    """Waits until the level's events are finished and their callbacks delivered, then
    reads latencies and the lost/doubled checks."""
    expected = len(sender.accepted)
    done_events = done_calls = 0
    deadline = time.monotonic() + deadline_s
    with psycopg.connect(stack.url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                f"SELECT count(*) FILTER (WHERE e.state = 'completed'),"
                f" count(d.id) FILTER (WHERE d.state = 'delivered')"
                f" FROM events e LEFT JOIN deliveries d ON d.event_id = e.id WHERE {LEVEL}",
                window(level),
            ).fetchone()
            assert row is not None
            done_events, done_calls = int(row[0]), int(row[1])
            if done_events >= expected and done_calls >= expected:
                break
            time.sleep(0.5)
        completed = quantiles(
            conn,
            "SELECT extract(epoch FROM e.finished_at - e.received_at) * 1000 AS ms"
            f" FROM events e WHERE {LEVEL} AND e.state = 'completed'",
            level,
        )
        callback = quantiles(
            conn,
            "SELECT extract(epoch FROM d.finished_at - e.received_at) * 1000 AS ms"
            " FROM events e JOIN deliveries d ON d.event_id = e.id"
            f" WHERE {LEVEL} AND d.state = 'delivered'",
            level,
        )
        row = conn.execute(
            f"SELECT count(*), count(DISTINCT e.key_digest),"
            f" (SELECT count(*) FROM pipeline_effects f JOIN events e"
            f"   ON f.step_key = e.public_id || '.apply' WHERE {LEVEL}),"
            f" (SELECT count(*) FROM deliveries d JOIN events e ON d.event_id = e.id"
            f"   WHERE {LEVEL})"
            f" FROM events e WHERE {LEVEL}",
            window(level),
        ).fetchone()
        assert row is not None
    events, distinct, effects, deliveries = (int(x) for x in row)
    return {
        "accepted_keys": expected,
        "events": events,
        "completed": done_events,
        "lost": max(0, expected - done_events),
        "doubled_events": events - distinct,
        "effects": effects,
        "deliveries": deliveries,
        "delivered": done_calls,
        "completed_ms": completed,
        "callback_ms": callback,
    }


# Work not yet done, whatever its level: events received or being run, deliveries waiting
# (due now or at a retry's time) or being sent.
BACKLOG = (
    "SELECT (SELECT count(*) FROM events WHERE state IN ('received', 'processing')),"
    " (SELECT count(*) FROM deliveries WHERE state IN ('pending', 'sending'))"
)


def settle(stack: Stack, deadline_s: float, since: float | None = None) -> float | None:
    """Waits until nothing is pending or running and no delivery is waiting, so the next
    level starts on an empty pipeline, not on the backlog of the one before; the seconds
    from ``since`` (default: now) until then, or None if ``deadline_s`` passed first."""
    start = time.monotonic() if since is None else since
    deadline = time.monotonic() + deadline_s
    with psycopg.connect(stack.url, autocommit=True) as conn:
        while True:
            row = conn.execute(BACKLOG).fetchone()
            assert row is not None
            if row[0] == 0 and row[1] == 0:
                return round(time.monotonic() - start, 1)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.25)


def sink_posts(stack: Stack) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", stack.sink_port, timeout=5)
    try:
        conn.request("GET", "/stats")
        return int(json.loads(conn.getresponse().read()).get("pipeline", 0))
    finally:
        conn.close()
