"""The scale benchmark's knowledge of the ledger's tables: the only module that names a column.

**Layout** (the same in the filled and the empty database, so that only the ledger differs):
``TENANTS`` tenants with two ``hmac`` sources and one endpoint each, plus the benchmark's
own tenant (``bench``) with the ``own`` source wrk signs for and the ``noop`` source the
drain runs, all on the no-op playbook (``bench/_drain_playbooks.py``).

**The fill**, one day at a time, oldest first, each day one transaction of COPYs fed by
generators (no more is held than one day's child keys): per event its row, one ``steps`` row
when it completed, its failed attempts, and for a share of them a delivery with its
attempts. Every generated event is terminal (completed or quarantined), so the drain
measures only the events it adds. Bodies are small JSON (about 200 bytes).
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
from sqlalchemy import create_engine

from inbox.domain import ledger
from inbox.domain.ledger import SEQUENCE_MASK, bounds, make_id, partition_name
from inbox.domain.sources import SourceOptions
from inbox.store import endpoints as endpoints_store
from inbox.store import sources as sources_store
from inbox.store.engine import sqlalchemy_url
from inbox.store.ledger_tables import DROP_ORDER, PARTITIONED

TENANT, SOURCE, DRAIN_SOURCE = "bench", "own", "noop"
PLAYBOOK = "bench-noop"
EVENT_TYPE = "bench.noop"  # the no-op playbook's type: a replayed event drains cleanly
TENANTS = 20
KEY_HOURS = 24  # the default key window (INBOX_KEY_TTL_HOURS) of an hmac source
DEAD_LETTER_TENANT = "tenant00"  # whose dead letters the filtered lists read
SECRET = "bench-scale-secret"

# What the sizing counts: the keys and every partitioned ledger table.
LEDGER = ("event_keys", *DROP_ORDER)

# Shares of the generated events.
QUARANTINED = 0.02  # dead letters, after 5 failed attempts
RETRIED = 0.05  # completed after one failed attempt
DUPLICATED = 0.10  # received more than once
DELIVERED = 0.30  # made one outbound delivery
DELIVERY_FAILED = 0.02  # of deliveries: failed after 4 attempts
DELIVERY_RETRIED = 0.08  # of deliveries: delivered on the 2nd attempt


@dataclass(frozen=True)
class Tenant:
    id: int
    name: str
    sources: tuple[int, ...]
    endpoints: tuple[int, ...]


@dataclass
class Layout:
    tenants: list[Tenant] = field(default_factory=list)
    source_ids: dict[str, int] = field(default_factory=dict)  # the bench tenant's sources


def setup(url: str) -> Layout:
    """Tenants, sources and endpoints, made through the project's store functions."""
    engine = create_engine(sqlalchemy_url(url))
    layout = Layout()
    opts = SourceOptions.from_dict({"playbook": PLAYBOOK})
    try:
        with engine.begin() as conn:
            for i in range(TENANTS):
                name = f"tenant{i:02d}"
                t = sources_store.create_tenant(conn, name)
                srcs = tuple(
                    sources_store.create_source(conn, name, s, "hmac", [SECRET], opts).id
                    for s in ("billing", "shop")
                )
                ep = endpoints_store.create_endpoint(
                    conn, name, f"http://127.0.0.1:9/{name}", SECRET
                )
                layout.tenants.append(Tenant(t.id, name, srcs, (ep.id,)))
            sources_store.create_tenant(conn, TENANT)
            for s, scheme in ((SOURCE, "hmac"), (DRAIN_SOURCE, "none")):
                secrets = [SECRET] if scheme != "none" else []
                src = sources_store.create_source(conn, TENANT, s, scheme, secrets, opts)
                layout.source_ids[s] = src.id
    finally:
        engine.dispose()
    return layout


# -- the fill ----------------------------------------------------------------------------

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


def _fill_one(url: str, day: dt.date, n: int, layout: Layout, keys_until: dt.datetime) -> dict:
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
    with psycopg.connect(url, autocommit=True) as conn:
        create_partitions(conn, [d for d, _ in plan])
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


# -- what the phases ask of the ledger ---------------------------------------------------


def _today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def insert_pending(url: str, source_id: int, n: int) -> int:
    """``n`` accepted events of the drain's source, as the receiver stores them (today's
    ids and public ids, from the column defaults); then today's partition is analyzed.
    Returns the first id: the drain's events are those of its source from there."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "WITH ins AS (INSERT INTO events (public_id, tenant_id, source_id, event_type,"
            " content_type, body, body_sha256, response_status, response_body)"
            " SELECT 'evt_' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')"
            " || substr(md5(random()::text || g), 1, 16), s.tenant_id, s.id, %(type)s,"
            " 'application/json', convert_to('{\"type\":\"bench.noop\"}', 'UTF8'), '\\x00',"
            " 202, '' FROM generate_series(1, %(n)s) g, sources s WHERE s.id = %(s)s"
            " RETURNING id) SELECT min(id) FROM ins",
            {"type": EVENT_TYPE, "s": source_id, "n": n},
        ).fetchone()
        conn.execute(f"ANALYZE {partition_name('events', _today())}")
    assert row is not None
    return int(row[0])


# The events of one source since yesterday (the ingest and drain phases' own), through
# the listing index and only the newest partitions.
_RECENT = (
    " tenant_id = (SELECT tenant_id FROM sources WHERE id = %(s)s) AND source_id = %(s)s"
    " AND id >= %(since)s"
)


def settle(url: str, source_id: int) -> int:
    """Take the ingest phase's accepted events through processing to completed, as a
    worker would have (no broker rang for them): the drain then finds only its own
    events, and the reads see terminal rows. Returns how many."""
    since = bounds(_today() - dt.timedelta(days=1))[0]
    params = {"s": source_id, "since": since}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE events SET state = 'processing', lease_owner = 'bench-scale',"
            " lease_expires_at = now() + interval '1 minute', fence = fence + 1,"
            f" attempts = attempts + 1 WHERE {_RECENT} AND state = 'received'",
            params,
        )
        cur = conn.execute(
            "UPDATE events SET state = 'completed', finished_at = now(), outcome = 'done',"
            f" lease_owner = NULL, lease_expires_at = NULL WHERE {_RECENT}"
            " AND state = 'processing'",
            params,
        )
        return cur.rowcount


def drain_progress(conn: psycopg.Connection, source_id: int, since_id: int) -> tuple[int, float]:
    """(finished events of the drain, epoch of the latest finish)."""
    row = conn.execute(
        "SELECT count(*), coalesce(extract(epoch FROM max(finished_at)), 0) FROM events"
        f" WHERE {_RECENT} AND state IN ('completed', 'quarantined')",
        {"s": source_id, "since": since_id},
    ).fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


def sample_public_ids(conn: psycopg.Connection, n: int) -> list[str]:
    """``n`` events' public ids from random pages of the whole ledger."""
    total = conn.execute(
        "SELECT sum(greatest(c.reltuples, 0)) FROM pg_partition_tree('events') p"
        " JOIN pg_class c ON c.oid = p.relid WHERE p.isleaf"
    ).fetchone()
    share = min(100.0, 100.0 * 4 * n / max(float(total[0]) if total else 1.0, 1.0))
    rows = conn.execute(
        f"SELECT public_id FROM events TABLESAMPLE SYSTEM ({share:.6f}) LIMIT %s", (n,)
    ).fetchall()
    if len(rows) < n:  # a small ledger: every row may be taken
        rows = conn.execute(
            "SELECT public_id FROM events ORDER BY random() LIMIT %s", (n,)
        ).fetchall()
    ids = [r[0] for r in rows]
    random.Random(7).shuffle(ids)
    return ids


def sizes(conn: psycopg.Connection) -> dict[str, int]:
    """Bytes on disk per ledger table, its partitions, indexes and TOAST included."""
    out: dict[str, int] = {}
    for table in LEDGER:
        # pg_partition_tree lists a partitioned table's partitions, nothing for a plain one
        row = conn.execute(
            "SELECT coalesce((SELECT sum(pg_total_relation_size(relid))"
            " FROM pg_partition_tree(%(t)s::regclass)), pg_total_relation_size(%(t)s::regclass))",
            {"t": table},
        ).fetchone()
        out[table] = int(row[0]) if row else 0
    return out


def _partitioned(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT relkind FROM pg_class WHERE relname = 'events'").fetchone()
    return row is not None and row[0] == "p"


def _day_rows(conn: psycopg.Connection, day: dt.date) -> dict[str, int]:
    lower, upper = bounds(day)
    out = {}
    for table in DROP_ORDER:
        column = PARTITIONED[table]
        row = conn.execute(
            f"SELECT count(*) FROM {table} WHERE {column} >= %s AND {column} < %s",
            (lower, upper),
        ).fetchone()
        out[table] = int(row[0]) if row else 0
    return out


def _delete_day(conn: psycopg.Connection, day: dt.date) -> float:
    """Seconds to DELETE a day's rows from every ledger table, children first, in one
    transaction; rolled back, so the same rows are there for the drop."""
    lower, upper = bounds(day)
    started = time.monotonic()
    with conn.transaction(force_rollback=True):
        for table in DROP_ORDER:
            column = PARTITIONED[table]
            conn.execute(
                f"DELETE FROM {table} WHERE {column} >= %s AND {column} < %s", (lower, upper)
            )
        took = time.monotonic() - started
    return took


def _drop_day(conn: psycopg.Connection, day: dt.date) -> float:
    """Seconds to detach and drop a day's partitions of every ledger table, children
    first, in one transaction (what retention does to a day past its window)."""
    started = time.monotonic()
    with conn.transaction():
        for table in DROP_ORDER:
            name = partition_name(table, day)
            conn.execute(f"ALTER TABLE {table} DETACH PARTITION {name}")
            conn.execute(f"DROP TABLE {name}")
    return time.monotonic() - started


def drop_versus_delete(url: str, empty_url: str, fill: dict[str, Any]) -> dict[str, Any] | None:
    """The oldest day of the filled ledger: DELETE its rows (rolled back), then drop its
    partitions; beside it the same day's partitions dropped from the empty ledger."""
    day = dt.date.fromisoformat(fill["first_day"])
    with psycopg.connect(url, autocommit=True) as conn:
        if not _partitioned(conn):
            return None  # main's schema: one table per kind, nothing to drop
        rows = _day_rows(conn, day)
        delete_s = _delete_day(conn, day)
        conn.execute("CHECKPOINT")  # the drop does not pay for the DELETE's dirty pages
        drop_s = _drop_day(conn, day)
    with psycopg.connect(empty_url, autocommit=True) as conn:
        create_partitions(conn, [day])
        empty_drop_s = _drop_day(conn, day)
    return {
        "day": day.isoformat(),
        "rows": rows,
        "delete_s": delete_s,
        "drop_s": drop_s,
        "empty_drop_s": empty_drop_s,
    }


def create_partitions(conn: psycopg.Connection, days: list[dt.date]) -> None:
    """Every ledger table's partition for each day (the migration's own function)."""
    for day in days:
        for table in PARTITIONED:
            conn.execute("SELECT inbox_create_partition(%s, %s)", (table, day))
