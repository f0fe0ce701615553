"""The scale benchmark's fill: a ledger of synthetic events written by COPY.

One day at a time, oldest first, ``jobs`` days at once (a process and a connection
each), each day one transaction of COPYs straight into the day's partitions, fed by
generators (no more is held than one day's child keys): per event its row, a ``steps``
row when it completed, its failed attempts, for a share of them a delivery with its
attempts, and an ``event_keys`` row while its key is inside its window. Every generated
event is terminal (completed or quarantined), so the drain measures only the events it
adds. Bodies are small JSON (about 180 bytes). Every index of the real schema is in
place during the fill.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.scale import ledger as sl
from inbox.domain import ledger
from inbox.domain.ledger import SEQUENCE_MASK, make_id, partition_name

EVENT_TYPE, KEY_HOURS = sl.EVENT_TYPE, sl.KEY_HOURS
Layout = sl.Layout

# Shares of the generated events.
QUARANTINED = 0.02  # dead letters, after 5 failed attempts
RETRIED = 0.05  # completed after one failed attempt
DUPLICATED = 0.10  # received more than once
DELIVERED = 0.30  # made one outbound delivery
DELIVERY_FAILED = 0.02  # of deliveries: failed after 4 attempts
DELIVERY_RETRIED = 0.08  # of deliveries: delivered on the 2nd attempt


_EVENT_COLS = (
    "id, public_id, tenant_id, source_id, key_digest, event_type,"
    " content_type, body, body_sha256, headers, response_status, response_body, state,"
    " attempts, replay, available_at, fence, received_at, finished_at, last_error_class,"
    " last_error_message, duplicate_count, first_duplicate_at, last_duplicate_at, outcome"
)
_HEADERS = json.dumps({"user-agent": "bench-provider/1.0", "content-type": "application/json"})
_ERROR = ("RuntimeError", "the downstream answered 503")


class Ids:
    """Row ids that carry their day (``inbox.domain.ledger.make_id``), one counter per
    table and day: a day's rows can be made by any process, and ``fill`` moves the
    sequences past them afterwards."""

    def __init__(self, day: dt.date) -> None:
        self.day = day
        self.next: dict[str, int] = {}

    def take(self, table: str) -> int:
        n = self.next.get(table, 1)
        self.next[table] = n + 1
        return make_id(self.day, n)


@dataclass
class DayRows:
    """What one day's generators produced, for the children's COPYs."""

    keys: list[tuple[Any, ...]] = field(default_factory=list)
    steps: list[tuple[int, dt.datetime]] = field(default_factory=list)
    failures: list[tuple[int, dt.datetime, int, bool]] = field(default_factory=list)
    deliveries: list[tuple[int, int, int, dt.datetime]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def _events(
    day: dt.date,
    n: int,
    layout: Layout,
    ids: Ids,
    rng: random.Random,
    keys_until: dt.datetime,
    out: DayRows,
) -> Iterator[tuple[Any, ...]]:
    start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
    spacing = 86_400 / max(n, 1)
    for seq in range(n):
        tenant = layout.tenants[seq % len(layout.tenants)]
        source = tenant.sources[(seq // len(layout.tenants)) % len(tenant.sources)]
        event_id = ids.take("events")
        public_id = ledger.public_id("evt_", day, f"{rng.getrandbits(64):016x}")
        received = start + dt.timedelta(seconds=seq * spacing)
        body = (
            f'{{"id":"{public_id}","type":"invoice.paid","created":{int(received.timestamp())},'
            f'"data":{{"object":{{"id":"in_{seq:010d}","amount":{rng.randrange(100, 99999)},'
            f'"currency":"eur","customer":"cus_{rng.getrandbits(40):010x}"}}}}}}'
        ).encode()
        draw = rng.random()
        quarantined = draw < QUARANTINED
        retried = not quarantined and draw < QUARANTINED + RETRIED
        finished = received + dt.timedelta(milliseconds=rng.randrange(5, 400))
        expires = received + dt.timedelta(hours=KEY_HOURS)
        key = hashlib.sha256(body + b"key").digest() if expires > keys_until else None
        dup = rng.random() < DUPLICATED
        dup_at = received + dt.timedelta(seconds=30) if dup else None
        response = f'{{"id":"{public_id}","status":"accepted"}}'.encode()
        body_sha256 = hashlib.sha256(body).digest()
        # While a key lives its copies are counted on it; on the event once it is pruned.
        on_event = key is None
        yield (
            event_id, public_id, tenant.id, source, key,
            EVENT_TYPE, "application/json", body, body_sha256, _HEADERS, 202, response,
            "quarantined" if quarantined else "completed",
            5 if quarantined else (2 if retried else 1), 0, received, 5 if quarantined else 1,
            received, finished,
            _ERROR[0] if quarantined else None, _ERROR[1] if quarantined else None,
            int(dup and on_event), dup_at if on_event else None, dup_at if on_event else None,
            None if quarantined else "done",
        )  # fmt: skip
        if key is not None:
            out.keys.append((
                tenant.id, source, key, event_id, public_id, expires, body_sha256, 202,
                response, False, int(dup), dup_at, dup_at,
            ))  # fmt: skip
        if quarantined:
            out.failures += [(event_id, finished, a, a == 5) for a in range(1, 6)]
        else:
            if retried:
                out.failures.append((event_id, received, 1, False))
            out.steps.append((event_id, finished))
            if rng.random() < DELIVERED:
                out.deliveries.append((event_id, tenant.id, tenant.endpoints[0], finished))
    out.counts["events"] = n


def _keys(out: DayRows) -> Iterator[tuple[Any, ...]]:
    yield from out.keys
    out.counts["event_keys"] = len(out.keys)


def _steps(out: DayRows) -> Iterator[tuple[Any, ...]]:
    for event_id, at in out.steps:
        yield (event_id, "noop", "{}", 1, 0, at)
    out.counts["steps"] = len(out.steps)


def _failures(day: dt.date, ids: Ids, out: DayRows) -> Iterator[tuple[Any, ...]]:
    for event_id, at, attempt, last in out.failures:
        yield (
            ids.take("event_attempts"), event_id, at, attempt, "noop", *_ERROR,
            None, "quarantined" if last else "retry",
        )  # fmt: skip
    out.counts["event_attempts"] = len(out.failures)


def _deliveries(
    day: dt.date, ids: Ids, rng: random.Random, out: DayRows, attempts: list[tuple[Any, ...]]
) -> Iterator[tuple[Any, ...]]:
    for event_id, tenant_id, endpoint_id, at in out.deliveries:
        delivery_id = ids.take("deliveries")
        draw = rng.random()
        failed = draw < DELIVERY_FAILED
        tries = 4 if failed else (2 if draw < DELIVERY_FAILED + DELIVERY_RETRIED else 1)
        done = at + dt.timedelta(seconds=35 * (tries - 1), milliseconds=40)
        body = f'{{"type":"invoice.settled","data":{{"event":{event_id}}}}}'.encode()
        yield (
            delivery_id, f"msg_{rng.getrandbits(96):024x}", tenant_id, endpoint_id, event_id,
            "invoice.settled", body, "failed" if failed else "delivered", 0, tries, at,
            0, 503 if failed else 200, "503 Service Unavailable" if failed else None, at, done,
        )  # fmt: skip
        for n in range(1, tries + 1):
            ok = n == tries and not failed
            attempts.append((delivery_id, at + dt.timedelta(seconds=35 * (n - 1)), ok))
    out.counts["deliveries"] = len(out.deliveries)


def _delivery_attempts(
    day: dt.date, ids: Ids, attempts: list[tuple[Any, ...]], out: DayRows
) -> Iterator[tuple[Any, ...]]:
    for delivery_id, at, ok in attempts:
        yield (
            ids.take("delivery_attempts"), delivery_id, at, 200 if ok else 503,
            None, 40, "ok" if ok else "Service Unavailable",
        )  # fmt: skip
    out.counts["delivery_attempts"] = len(attempts)


def _copy(cur: psycopg.Cursor[Any], sql: str, rows: Iterator[tuple[Any, ...]]) -> None:
    with cur.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)


def fill_day(
    conn: psycopg.Connection,
    day: dt.date,
    n: int,
    layout: Layout,
    seed: int,
    keys_until: dt.datetime,
) -> dict[str, int]:
    """One day's rows, in one transaction, straight into the day's partitions (as a bulk
    load would be written: the rows, indexes and constraints are the same as through
    the parent, without routing each row)."""
    rng = random.Random(seed)
    ids = Ids(day)
    out = DayRows()
    attempts: list[tuple[Any, ...]] = []
    with conn.transaction(), conn.cursor() as cur:
        _copy(
            cur,
            f"COPY {partition_name('events', day)} ({_EVENT_COLS}) FROM STDIN",
            _events(day, n, layout, ids, rng, keys_until, out),
        )
        _copy(
            cur,
            "COPY event_keys (tenant_id, source_id, key_digest, event_id, public_id,"
            " expires_at, body_sha256, response_status, response_body, sync, duplicate_count,"
            " first_duplicate_at, last_duplicate_at) FROM STDIN",
            _keys(out),
        )
        _copy(
            cur,
            f"COPY {partition_name('steps', day)} (event_id, name, result, attempt, replay,"
            " completed_at) FROM STDIN",
            _steps(out),
        )
        _copy(
            cur,
            f"COPY {partition_name('event_attempts', day)} (id, event_id, at, attempt, step,"
            " error_class,"
            " error_message, traceback, outcome) FROM STDIN",
            _failures(day, ids, out),
        )
        _copy(
            cur,
            f"COPY {partition_name('deliveries', day)} (id, public_id, tenant_id, endpoint_id,"
            " event_id,"
            " event_type, body, state, replay, attempts, available_at, fence, last_status,"
            " last_error, created_at, finished_at) FROM STDIN",
            _deliveries(day, ids, rng, out, attempts),
        )
        _copy(
            cur,
            f"COPY {partition_name('delivery_attempts', day)} (id, delivery_id, at, status,"
            " error_class,"
            " latency_ms, excerpt) FROM STDIN",
            _delivery_attempts(day, ids, attempts, out),
        )
    return out.counts  # fmt: skip


def _fill_one(
    url: str, day: dt.date, n: int, layout: Layout, keys_until: dt.datetime
) -> dict[str, int]:
    """A fill job's day (in a process of its own)."""
    with psycopg.connect(url) as conn:
        return fill_day(conn, day, n, layout, day.toordinal(), keys_until)


def fill(
    url: str, layout: Layout, events: int, days: int, jobs: int, say: Callable[[str], None]
) -> dict[str, Any]:
    """``events`` events over ``days`` days ending yesterday, ``jobs`` days at a time
    (one process and one connection each); then the sequences are moved past the ids
    used, and every table is vacuumed and analyzed (a year-old ledger has long been seen
    by autovacuum)."""
    today = dt.datetime.now(dt.UTC).date()
    first = today - dt.timedelta(days=days)
    keys_until = dt.datetime.now(dt.UTC)
    totals: dict[str, int] = {}
    started = time.monotonic()
    plan = [
        (first + dt.timedelta(days=i), events // days + (1 if i < events % days else 0))
        for i in range(days)
    ]
    sl.make_days(url, [d for d, _ in plan])
    partitions_s = time.monotonic() - started
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_fill_one, url, d, n, layout, keys_until) for d, n in plan]
        for i, future in enumerate(as_completed(futures)):
            for k, v in future.result().items():
                totals[k] = totals.get(k, 0) + v
            if i % 10 == 9 or i == days - 1:
                rate = totals["events"] / (time.monotonic() - started)
                say(f"  filled {i + 1}/{days} days, {totals['events']:,} events ({rate:,.0f}/s)")
    copy_s = time.monotonic() - started
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        # The sequences fill an id's low 40 bits (inbox_ledger_id): past the highest used.
        for table in ("events", "event_attempts", "deliveries", "delivery_attempts"):
            cur.execute(
                f"SELECT setval('{table}_id_seq',"
                f" (SELECT coalesce(max(id & {SEQUENCE_MASK}), 1) FROM {table}))"
            )
    vacuum_s = vacuum(url)
    return {
        "rows": totals,
        "first_day": first.isoformat(),
        "days": days,
        "jobs": jobs,
        "partitions_seconds": round(partitions_s, 1),
        "copy_seconds": round(copy_s, 1),
        "vacuum_analyze_seconds": round(vacuum_s, 1),
        "events_per_s": round(totals["events"] / copy_s),
    }


def vacuum(url: str) -> float:
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    return time.monotonic() - started
