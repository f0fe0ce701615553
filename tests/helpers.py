"""Helpers for tests: what a tenant's own system sends to an `hmac` source, the rows as
they read, and a wait on a condition."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

from inbox.store.reads.ledger_reads import EVENT_ROW, KEYS_JOIN

# Every event as it reads: its row with its live key's duplicate counters added.
EVENTS = f"SELECT {EVENT_ROW} FROM events e {KEYS_JOIN}"


def hmac_headers(
    secret: str, body: bytes, key: str | None = None, ts: int | None = None, **extra: str
) -> dict[str, str]:
    ts = int(time.time()) if ts is None else ts
    sig = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    headers = {"Content-Type": "application/json", "X-Timestamp": str(ts), "X-Signature": sig}
    if key is not None:
        headers["Idempotency-Key"] = key
    headers.update(extra)
    return headers


def body_of(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def sink_rows(engine: Any) -> list[Any]:
    from sqlalchemy import text

    with engine.connect() as conn:
        return list(conn.execute(text("SELECT * FROM test_sink ORDER BY id")))


def events_by_state(engine: Any) -> dict[str, int]:
    from sqlalchemy import text

    with engine.connect() as conn:
        rows = conn.execute(text("SELECT state, count(*) FROM events GROUP BY state"))
        return {r[0]: int(r[1]) for r in rows}


def insert_pending(engine: Any, src: Any, n: int, payload: Any) -> None:
    """n accepted events of ``src`` with this payload, written as the receiver writes them,
    without ringing: for tests of what drains them, where sending each through the receiver
    would only take time (1000 requests: most of such a test's run)."""
    from sqlalchemy import text

    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO events (public_id, tenant_id, source_id, event_type, content_type,"
                " body, body_sha256, response_status, response_body)"
                " SELECT 'evt_p' || g, :t, :s, :type, 'application/json', CAST(:body AS bytea),"
                " '\\x00', 202, '' FROM generate_series(1, :n) g"
            ),
            {
                "t": src.tenant_id,
                "s": src.id,
                "n": n,
                "type": payload["type"],
                "body": body_of(payload).decode(),
            },
        )


def keyed_insert(insert_events: str, returning: str = "id") -> str:
    """``insert_events`` (an INSERT INTO events without RETURNING) and, when the row has a
    key, its ``event_keys`` row expiring at ``:ke``, as the claim writes them; the new
    row's ``returning`` column comes back."""
    return f"""
    WITH e AS ({insert_events} RETURNING *),
    k AS (
        INSERT INTO event_keys (tenant_id, source_id, key_digest, event_id, public_id,
                                expires_at, body_sha256, response_status, response_body, sync)
        SELECT tenant_id, source_id, key_digest, id, public_id, CAST(:ke AS timestamptz),
               body_sha256, response_status, response_body, sync
          FROM e WHERE key_digest IS NOT NULL
    )
    SELECT {returning} FROM e
    """


LONGEST_INTERVAL = 0.1  # seconds between the checks of a long wait


def eventually(
    condition: Callable[[], bool], seconds: float = 30.0, interval: float = 0.005
) -> bool:
    """True as soon as ``condition()`` holds, False once ``seconds`` have passed without.

    The one place tests wait: every other wait is on a condition, through this or
    ``wait_for`` (tests/unit/test_no_sleeps.py keeps it so). The first checks come
    ``interval`` apart, later ones up to ``LONGEST_INTERVAL``: a condition that holds
    at once is seen at once, and a long wait (a process starting, a lease lapsing) does
    not spend the CPU the processes it waits on need, as a check every 5 ms for a
    minute would (each check is often a query)."""
    deadline = time.monotonic() + seconds
    pause = interval
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = max(interval, min(pause * 1.5, LONGEST_INTERVAL))
    return True


def wait_for(
    condition: Callable[[], bool],
    seconds: float = 30.0,
    what: str = "condition",
    interval: float = 0.005,
) -> None:
    """Until ``condition()`` holds; fails the test past ``seconds``."""
    assert eventually(condition, seconds, interval), f"{what} not met in time"


def leases_expired(engine: Any, table: str = "events") -> bool:
    """Every lease on ``table`` has run out by the database's clock (leases are set by it);
    wait on this, not on a sleep of the lease's length."""
    from sqlalchemy import text

    with engine.connect() as conn:
        live = f"SELECT EXISTS (SELECT 1 FROM {table} WHERE lease_expires_at >= now())"
        return not conn.execute(text(live)).scalar_one()


class Clock:
    """A monotonic clock a test moves by hand, for code that takes ``clock=``."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def stop_and_settle(procs: list[Any], engine: Any, seconds: float = 30.0) -> None:
    """Stop a test's processes (celery hard, the rest gently), then wait until no other
    session on the test database is busy or inside a transaction (a killed client's backend
    may still run its statement and hold its locks for a moment), so the tables can be
    emptied after the test. Idle sessions (a pooler's, kept open) hold nothing."""
    import signal

    from sqlalchemy import text

    from tests.procs import CeleryProc

    for p in procs:
        p.stop(signal.SIGKILL if isinstance(p, CeleryProc) else signal.SIGTERM)
    others = text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        " AND state IS DISTINCT FROM 'idle'"
    )

    def settled() -> bool:
        with engine.connect() as conn:
            return conn.execute(others).scalar() == 0

    wait_for(settled, seconds)


def states_of(engine: Any, *source_ids: int) -> dict[str, int]:
    """Events by state, of these sources only."""
    from sqlalchemy import text

    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT state, count(*) FROM events WHERE source_id = ANY(:s) GROUP BY state"),
            {"s": list(source_ids)},
        )
        return {r[0]: int(r[1]) for r in rows}
