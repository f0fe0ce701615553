"""The scale benchmark's ledger: its layout, and what the phases ask of it.

**Layout** (the same in the filled and the empty database, so that only the ledger differs):
``TENANTS`` tenants with two ``hmac`` sources and one endpoint each, plus the benchmark's
own tenant (``bench``) with the ``own`` source wrk signs for and the ``noop`` source the
drain runs, all on the no-op playbook (``bench/drain.py``).

The fill is ``bench/scale/fill.py``; here is what the phases ask of the ledger.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from sqlalchemy import create_engine

from inbox.domain.ledger import bounds, partition_name
from inbox.domain.sources import SourceOptions
from inbox.store.db.engine import sqlalchemy_url
from inbox.store.schema import partitions
from inbox.store.schema.ledger_tables import DROP_ORDER, PARTITIONED
from inbox.store.write import endpoints as endpoints_store
from inbox.store.write import sources as sources_store

TENANT, SOURCE, DRAIN_SOURCE = "bench", "own", "noop"
PLAYBOOK = "bench-noop"
EVENT_TYPE = "bench.noop"  # the no-op playbook's type: a replayed event drains cleanly
TENANTS = 20
KEY_HOURS = 24  # the default key window (INBOX_KEY_TTL_HOURS) of an hmac source
DEAD_LETTER_TENANT = "tenant00"  # whose dead letters the filtered lists read
SECRET = "bench-scale-secret"

# What the sizing counts: the keys and every partitioned ledger table.
LEDGER = ("event_keys", *DROP_ORDER)


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


def _retire(url: str, day: dt.date) -> float:
    """Seconds for retention's own drop of ``day`` (``inbox.store.schema.partitions.retire`` with
    a window that ``day`` alone is past: the lock, the check that nothing keeps the day,
    DETACH and DROP of every table's partition, children first)."""
    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.connect() as conn:
            window = (partitions.today(conn) - day).days
        started = time.monotonic()
        retired = partitions.retire(engine, window)
        took = time.monotonic() - started
    finally:
        engine.dispose()
    if retired.dropped != [day]:
        raise RuntimeError(f"retention dropped {retired.dropped}, kept {retired.kept}")
    return took


def make_days(url: str, days: list[dt.date]) -> None:
    """Every ledger table's partition for each day, as beat makes them ahead of time."""
    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.begin() as conn:
            for day in days:
                partitions.make_day(conn, day)
    finally:
        engine.dispose()


def drop_versus_delete(url: str, empty_url: str, fill: dict[str, Any]) -> dict[str, Any]:
    """The oldest day of the filled ledger: DELETE its rows (rolled back), then retention
    drops its partitions; beside it the same day's (empty) partitions dropped from the
    empty ledger."""
    day = dt.date.fromisoformat(fill["first_day"])
    with psycopg.connect(url, autocommit=True) as conn:
        rows = _day_rows(conn, day)
        delete_s = _delete_day(conn, day)
        conn.execute("CHECKPOINT")  # the drop does not pay for the DELETE's dirty pages
    drop_s = _retire(url, day)
    make_days(empty_url, [day])
    empty_drop_s = _retire(empty_url, day)
    return {
        "day": day.isoformat(),
        "rows": rows,
        "delete_s": delete_s,
        "drop_s": drop_s,
        "empty_drop_s": empty_drop_s,
    }
