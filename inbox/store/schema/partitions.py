"""The ledger's day partitions: made ahead of time, and dropped a whole day at a time.

Made by hand (``inbox_create_partition``, migration 0012), not by pg_partman: the
embedded PostgreSQL of ``make run`` (the pgserver wheel) has no extensions, and one SQL
function per day is all this needs. Beat runs ``ensure_ahead`` (today and the week
ahead, for every ledger table, idempotently); ``inbox migrate`` made the first ones.

Every ledger table also has a DEFAULT partition, so an insert never fails when beat has
been down. A day's partition cannot be created while its DEFAULT holds rows of that day,
so ``make_day`` first moves them: the rows are copied into a new table, deleted from the
DEFAULT partition, and the table is attached as the day's partition, all in one
transaction; then each child's day gets its key into its parent's day
(``inbox_link_partition``, checked as it is added).

``retire`` drops a day: children first (``DROP_ORDER``), each DETACHed, then DROPped.
Not ``DETACH ... CONCURRENTLY``: PostgreSQL refuses it on a table with a DEFAULT
partition. A plain DETACH holds the parent's lock only for the moment of the commit;
the transaction runs under a short ``lock_timeout``, so a busy moment makes the day wait
for the next round instead of stalling the receivers. The day's partitions are locked
first and checked again under the lock, so an event replayed meanwhile keeps its day.
A day holding an event under a legal hold (or a delivery of one) is never dropped.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

from psycopg.errors import LockNotAvailable
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError  # noqa: TID251

from inbox.domain import ledger
from inbox.domain.retention import DayContents, day_kept_because
from inbox.store.schema import holds
from inbox.store.schema.ledger_tables import DROP_ORDER, PARTITIONED

log = logging.getLogger(__name__)

AHEAD_DAYS = 7
LOCK_TIMEOUT_MS = 2000


@dataclass
class Made:
    """What ``ensure_ahead`` did: partitions created, rows moved out of DEFAULT."""

    created: list[str] = field(default_factory=list)
    moved: int = 0


def today(conn: Connection) -> dt.date:
    """The database's UTC day (the one new ids carry)."""
    value = conn.execute(text("SELECT CAST(now() AT TIME ZONE 'UTC' AS date)")).scalar_one()
    assert isinstance(value, dt.date)
    return value


def days(conn: Connection, table: str = "events") -> list[dt.date]:
    """The days ``table`` has a partition for, oldest first (not the DEFAULT one)."""
    rows = conn.execute(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = CAST(:t AS regclass)"
        ),
        {"t": table},
    )
    found = (ledger.day_of_partition(table, r.relname) for r in rows)
    return sorted(d for d in found if d is not None)


def _in_day(key: str) -> str:
    return f"{key} >= :lo AND {key} < :hi"


def _exists(conn: Connection, name: str) -> bool:
    return bool(conn.execute(text("SELECT to_regclass(:n) IS NOT NULL"), {"n": name}).scalar_one())


def make_day(conn: Connection, day: dt.date) -> Made:
    """``day``'s partition of every ledger table (those missing), in the caller's
    transaction; rows of that day in a DEFAULT partition are moved into it."""
    lo, hi = ledger.bounds(day)
    bounds = {"lo": lo, "hi": hi}
    made = Made()
    missing = [t for t in PARTITIONED if not _exists(conn, ledger.partition_name(t, day))]
    stuck = {
        t: int(
            conn.execute(
                text(f"SELECT count(*) FROM {t}_default WHERE {_in_day(PARTITIONED[t])}"), bounds
            ).scalar_one()
        )
        for t in missing
    }
    if not any(stuck.values()):
        for t in missing:
            conn.execute(text("SELECT inbox_create_partition(:t, :d)"), {"t": t, "d": day})
            made.created.append(ledger.partition_name(t, day))
        return made
    # Rows landed in DEFAULT (beat was down): copy them out, delete them there (children
    # first, so no cascade runs), attach, then link each child's day to its parent's.
    for t in missing:
        name = ledger.partition_name(t, day)
        like = f"LIKE {t} INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
        conn.execute(text(f"CREATE TABLE {name} ({like})"))
        conn.execute(
            text(f"INSERT INTO {name} SELECT * FROM {t}_default WHERE {_in_day(PARTITIONED[t])}"),
            bounds,
        )
    for t in reversed(missing):
        made.moved += conn.execute(
            text(f"DELETE FROM {t}_default WHERE {_in_day(PARTITIONED[t])}"), bounds
        ).rowcount
    for t in missing:
        name = ledger.partition_name(t, day)
        span = f"FROM ({lo}) TO ({hi})"
        conn.execute(text(f"ALTER TABLE {t} ATTACH PARTITION {name} FOR VALUES {span}"))
        made.created.append(name)
    for t in missing:
        conn.execute(text("SELECT inbox_link_partition(:t, :d)"), {"t": t, "d": day})
    log.warning("partitions: %d rows of %s moved out of the DEFAULT partitions", made.moved, day)
    return made


def ensure_ahead(engine: Engine, ahead_days: int = AHEAD_DAYS) -> Made:
    """Today's and the next ``ahead_days`` days' partitions, one transaction per day."""
    with engine.connect() as conn:
        start = today(conn)
    total = Made()
    for n in range(ahead_days + 1):
        with engine.begin() as conn:
            conn.execute(text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))
            made = make_day(conn, start + dt.timedelta(days=n))
        total.created += made.created
        total.moved += made.moved
    if total.created:
        log.info("partitions: created %s", ", ".join(total.created))
    return total


@dataclass(frozen=True)
class Day:
    """One day of the ledger as ``inbox partitions`` lists it (row counts are the
    planner's estimates: counting a year of rows would read a year of rows)."""

    day: dt.date
    events: int
    deliveries: int


def overview(conn: Connection) -> list[Day]:
    """Every day with a partition, oldest first, with its estimated rows."""
    rows = conn.execute(
        text(
            "SELECT c.relname, greatest(c.reltuples, 0)::bigint AS n FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent IN (CAST('events' AS regclass), CAST('deliveries' AS regclass))"
        )
    ).all()
    counts: dict[tuple[str, dt.date], int] = {}
    for r in rows:
        for table in ("events", "deliveries"):
            day = ledger.day_of_partition(table, r.relname)
            if day is not None:
                counts[(table, day)] = int(r.n)
    found = sorted({d for _, d in counts})
    return [Day(d, counts.get(("events", d), 0), counts.get(("deliveries", d), 0)) for d in found]


def contents(conn: Connection, day: dt.date) -> DayContents:
    """What keeps ``day``: its unfinished events and deliveries, and keys into it."""
    lo, hi = ledger.bounds(day)
    bounds = {"lo": lo, "hi": hi}

    def count(sql: str) -> int:
        return int(conn.execute(text(sql), bounds).scalar_one())

    return DayContents(
        unfinished_events=count(
            # A quarantined event that blocks its ordered lane counts as unfinished.
            f"SELECT count(*) FROM events WHERE {_in_day('id')}"
            " AND (state IN ('received', 'processing') OR id IN (SELECT event_id"
            f" FROM lane_blocks WHERE skipped_at IS NULL AND {_in_day('event_id')}))"
        ),
        unfinished_deliveries=count(
            f"SELECT count(*) FROM deliveries WHERE {_in_day('id')}"
            " AND state IN ('pending', 'sending', 'held')"
        ),
        live_keys=count(f"SELECT count(*) FROM event_keys WHERE {_in_day('event_id')}"),
        **_held(conn, bounds),
    )


def _held(conn: Connection, bounds: dict[str, int]) -> dict[str, Any]:
    """How many of the day's events are under a legal hold (with the events of the day's
    deliveries, wherever they are, and its deliveries of no event under a tenant-wide
    hold), and the public ids of those holds."""
    row = conn.execute(
        text(
            f"""
            WITH day_events AS (
                SELECT e.id, e.tenant_id, e.source_id, e.business_key_digest
                  FROM events e WHERE {_in_day("e.id")}
                UNION
                SELECT e.id, e.tenant_id, e.source_id, e.business_key_digest
                  FROM deliveries d JOIN events e ON e.id = d.event_id
                 WHERE {_in_day("d.id")}
            ), pairs AS (
                SELECT x.id, h.public_id FROM day_events x, {holds.covering("x")}
                UNION ALL
                SELECT -d.id, h.public_id FROM deliveries d
                  JOIN legal_holds h ON h.tenant_id = d.tenant_id
                 WHERE {_in_day("d.id")} AND d.event_id IS NULL
                   AND h.released_at IS NULL AND h.scope = 'tenant'
            )
            SELECT count(DISTINCT id) AS n, array_agg(DISTINCT public_id) AS holds FROM pairs
            """
        ),
        bounds,
    ).one()
    if not row.n:
        return {}
    return {"held_events": int(row.n), "holds": tuple(sorted(row.holds))}


def _drop(conn: Connection, day: dt.date) -> None:
    lo, hi = ledger.bounds(day)
    for t in DROP_ORDER:
        name = ledger.partition_name(t, day)
        if _exists(conn, name):
            conn.execute(text(f"ALTER TABLE {t} DETACH PARTITION {name}"))
            conn.execute(text(f"DROP TABLE {name}"))
    # Conflict records belong to their event (no foreign key: see ledger_tables).
    conn.execute(
        text(f"DELETE FROM idempotency_conflicts WHERE {_in_day('event_id')}"),
        {"lo": lo, "hi": hi},
    )


@dataclass
class Retired:
    dropped: list[dt.date] = field(default_factory=list)
    # (day, why it stays) for each day past the window that was kept.
    kept: list[tuple[dt.date, str]] = field(default_factory=list)


def retire(
    engine: Engine, window_days: int, now: dt.datetime | None = None, dry_run: bool = False
) -> Retired:
    """Drop each day older than ``window_days`` that nothing keeps (``day_kept_because``)."""
    with engine.connect() as conn:
        # Never today's day or later by the database's clock, whatever ``now`` says: the
        # receivers write there.
        current = today(conn)
        if now is not None:
            current = min(current, now.astimezone(dt.UTC).date())
        candidates = sorted(set().union(*(days(conn, t) for t in PARTITIONED)))
    result = Retired()
    for day in candidates:
        if day_kept_because(day, current, window_days, DayContents()) is not None:
            continue  # inside the window: nothing to say
        try:
            dropped = _retire_day(engine, day, current, window_days, dry_run, result)
        except OperationalError as exc:
            if not isinstance(exc.orig, LockNotAvailable):
                raise
            result.kept.append((day, f"busy: no lock within {LOCK_TIMEOUT_MS} ms, next round"))
            continue
        if dropped:
            result.dropped.append(day)
    for day, why in result.kept:
        log.info("partitions: %s kept: %s", day, why)
    if result.dropped:
        log.info(
            "partitions: %s %s",
            "would drop" if dry_run else "dropped",
            ", ".join(str(d) for d in result.dropped),
        )
    return result


def _retire_day(
    engine: Engine,
    day: dt.date,
    current: dt.date,
    window_days: int,
    dry_run: bool,
    result: Retired,
) -> bool:
    """Drop ``day`` unless something keeps it (then say why in ``result``)."""
    with engine.begin() as conn:
        conn.execute(text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))
        present = [
            ledger.partition_name(t, day)
            for t in DROP_ORDER
            if _exists(conn, ledger.partition_name(t, day))
        ]
        if not dry_run:  # no writer (nor a new legal hold) gets in between check and drop
            conn.execute(text(f"LOCK TABLE {', '.join(present)} IN ACCESS EXCLUSIVE MODE"))
            conn.execute(text("LOCK TABLE legal_holds IN SHARE MODE"))
        why = day_kept_because(day, current, window_days, contents(conn, day))
        if why is not None:
            result.kept.append((day, why))
            return False
        if not dry_run:
            _drop(conn, day)
        return True
