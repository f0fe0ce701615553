"""The console's dashboard: per-minute (last hour) and per-hour (last day) series.

Everything is read from the rows themselves, so the series survive restarts and add
up across every process: events by ``received_at`` and ``finished_at``, duplicates and
conflicts by their first/last timestamps, outbound attempts by ``delivery_attempts.at``.
Duplicates and conflicts are stored as a count with the first and last time, so the
first is placed at its time and the rest at the last time.

The depth (events received or processing) and the oldest pending event's age are
sampled at the end of each bucket (the last bucket: now). An event counts as pending
from when it was received, or from its latest replay, until it finished; for the last
bucket this is exactly what ``inbox.store.reads.stats`` reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, text

from inbox.store.reads.ledger_reads import COUNTERS, KEYS_JOIN
from inbox.store.reads.scope import Scope, scoped

# Events received longer than this before the window are only looked at when they are
# still pending or were replayed lately (the default dedup key lives 24 hours, so
# duplicates of older events cannot arrive unless a source keeps keys longer).
LOOKBACK = timedelta(days=1)

ATTEMPT_OUTCOMES = ("attempts_2xx", "attempts_4xx", "attempts_5xx", "attempts_error")
COUNTS = ("accepted", "duplicates", "conflicts", "quarantined", "completed", *ATTEMPT_OUTCOMES)
GAUGES = ("depth", "oldest_age_seconds")
MEASURES = COUNTS + GAUGES


@dataclass(frozen=True, slots=True)
class Window:
    name: str
    step_seconds: int
    buckets: int


WINDOWS = {"hour": Window("hour", 60, 60), "day": Window("day", 3600, 24)}


@dataclass(frozen=True, slots=True)
class Series:
    window: Window
    start: datetime  # the first bucket's start (aligned to the step, UTC)
    now: datetime  # the database's clock; the last bucket holds it
    values: dict[str, list[float]]  # measure → one value per bucket, oldest first

    def bucket_start(self, k: int) -> datetime:
        return self.start + timedelta(seconds=k * self.window.step_seconds)

    def total(self, measure: str) -> float:
        return sum(self.values[measure])


# Which events can have a timestamp inside the window, found through indexes only and
# in disjoint parts (no de-duplication): received within the lookback
# (ix_events_received_at) and not over before the window began, pending now (the
# partial indexes on state), or replayed lately (the audit log). ``pending_from``
# starts the event's current pending stretch: its latest replay, else its receipt.
# The duplicate counters: the event's own plus its live key's (inbox.store.reads.ledger_reads).
_COLUMNS = "e.id, e.state, e.received_at, e.finished_at," + COUNTERS
_SCOPE = scoped("e.tenant_id")
_EVENTS = f"""
WITH replays AS (
    SELECT subject_id AS id, max(at) AS at FROM audit_log
     WHERE subject_kind = 'event' AND action = 'replay' AND at >= :horizon
     GROUP BY subject_id
), candidates AS (
    SELECT {_COLUMNS} FROM events e {KEYS_JOIN}
     WHERE e.received_at >= :horizon AND {_SCOPE}
       AND (e.received_at >= :start OR e.finished_at IS NULL OR e.finished_at >= :start
            OR e.last_duplicate_at >= :start OR k.last_duplicate_at >= :start)
    UNION ALL
    SELECT {_COLUMNS} FROM events e {KEYS_JOIN}
     WHERE e.state = 'received' AND e.received_at < :horizon AND {_SCOPE}
    UNION ALL
    SELECT {_COLUMNS} FROM events e {KEYS_JOIN}
     WHERE e.state = 'processing' AND e.received_at < :horizon AND {_SCOPE}
    UNION ALL
    SELECT {_COLUMNS} FROM replays r JOIN events e ON e.id = r.id {KEYS_JOIN}
     WHERE e.received_at < :horizon AND e.state NOT IN ('received', 'processing') AND {_SCOPE}
), ev AS (
    SELECT c.*, greatest(c.received_at, r.at) AS pending_from,
           -- a finished event without a finish time was never seen waiting
           CASE WHEN c.state IN ('received', 'processing') THEN NULL
                ELSE coalesce(c.finished_at, c.received_at) END AS pending_until
      FROM candidates c LEFT JOIN replays r ON r.id = c.id
), conflicts AS (
    SELECT c.count, c.first_at, c.last_at
      FROM idempotency_conflicts c JOIN events e ON e.id = c.event_id
     WHERE c.last_at >= :start AND {_SCOPE}
), points AS (
    SELECT 'accepted' AS measure, received_at AS at, 1 AS n FROM ev
    UNION ALL SELECT 'completed', finished_at, 1 FROM ev WHERE state = 'completed'
    UNION ALL SELECT 'quarantined', finished_at, 1 FROM ev WHERE state = 'quarantined'
    UNION ALL SELECT 'duplicates', first_duplicate_at, 1 FROM ev WHERE duplicate_count > 0
    UNION ALL SELECT 'duplicates', last_duplicate_at, duplicate_count - 1
                FROM ev WHERE duplicate_count > 1
    UNION ALL SELECT 'conflicts', first_at, 1 FROM conflicts
    UNION ALL SELECT 'conflicts', last_at, count - 1 FROM conflicts WHERE count > 1
    UNION ALL
    SELECT CASE WHEN a.status BETWEEN 200 AND 299 THEN 'attempts_2xx'
                WHEN a.status >= 500 THEN 'attempts_5xx'
                WHEN a.status IS NOT NULL THEN 'attempts_4xx'
                ELSE 'attempts_error' END,
           a.at, 1
      FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
     WHERE a.at >= :start AND {scoped("d.tenant_id")}
), counted AS (
    -- Seconds since the window's start (:t0, as epoch seconds) over the step: the bucket.
    SELECT measure, floor((date_part('epoch', at) - :t0) / :step)::int AS k, sum(n) AS value
      FROM points WHERE at >= :start AND at < :end
     GROUP BY 1, 2
), spans AS (
    -- Bucket k is sampled at its end, start + (k+1)*step (the last one: now). An event
    -- is pending there when pending_from <= sample < pending_until: its samples run
    -- from ceil(f) - 1 to ceil(u) - 2, f and u being its ends in steps since the start.
    SELECT received_at, (date_part('epoch', pending_from) - :t0) / :step AS f,
           (date_part('epoch', pending_until) - :t0) / :step AS u
      FROM ev WHERE pending_until IS NULL OR pending_until > :start
), pending AS (
    -- Most events finish within the bucket they arrived in and span no sample at all:
    -- only the others are expanded into the samples they span.
    SELECT k, count(*) AS depth, min(received_at) AS oldest
      FROM spans CROSS JOIN LATERAL generate_series(
             greatest(0, ceil(f)::int - 1), least(:n - 1, coalesce(ceil(u)::int - 2, :n - 1))
           ) AS k
     WHERE u IS NULL OR ceil(u) - ceil(f) >= 1
     GROUP BY k
)
SELECT measure, k, value FROM counted
UNION ALL SELECT 'depth', k, depth FROM pending
UNION ALL
SELECT 'oldest_age_seconds', k,
       extract(epoch FROM least(:start + make_interval(secs => (k + 1) * :step), :now) - oldest)
  FROM pending
"""


def window_start(now: datetime, window: Window) -> datetime:
    """The first bucket's start: ``buckets`` whole steps ending with the one holding now."""
    step = window.step_seconds
    current = int(now.timestamp()) // step * step
    return datetime.fromtimestamp(current - (window.buckets - 1) * step, UTC)


def series(conn: Connection, window: Window, scope: Scope) -> Series:
    """Every measure of the dashboard over ``window``, for the tenant ``scope`` (None: all)."""
    now: datetime = conn.execute(text("SELECT now()")).scalar_one()
    start = window_start(now, window)
    end = start + timedelta(seconds=window.step_seconds * window.buckets)
    params: dict[str, Any] = {
        "start": start,
        "t0": start.timestamp(),
        "end": end,
        "now": now,
        "horizon": start - LOOKBACK,
        "step": window.step_seconds,
        "n": window.buckets,
        "scope": scope,
    }
    values: dict[str, list[float]] = {m: [0.0] * window.buckets for m in MEASURES}
    # generate_series' default estimate (1,000 rows per event) would make the planner
    # JIT-compile this query, which costs more than running it.
    conn.execute(text("SET LOCAL jit = off"))
    for row in conn.execute(text(_EVENTS), params):
        if 0 <= row.k < window.buckets:
            values[row.measure][row.k] = float(row.value)
    return Series(window, start, now, values)


def recent_bulk_replays(conn: Connection, scope: Scope, limit: int = 10) -> list[str]:
    """The public ids of the latest bulk replays the scope may see, newest first."""
    rows = conn.execute(
        text(
            "SELECT public_id FROM bulk_replays"
            f" WHERE {scoped('tenant_id')}"
            " ORDER BY id DESC LIMIT :n"
        ),
        {"scope": scope, "n": limit},
    )
    return [str(r.public_id) for r in rows]
