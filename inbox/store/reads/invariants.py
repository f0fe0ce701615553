"""The invariants' checks, as SQL (``inbox.domain.invariants`` names and explains them).

Every check is one statement (``lane_order``: two) that returns the violations it finds: a
``subject`` (what the violation is about, stable between passes), the event's ``trace_id``
where there is one, and ``rows``: the rows involved, as JSON, with a ``problem`` that says
what is wrong.

Scope (``Scope``): the ids ``since <= id < until`` of the table a check scans: everything
from a watermark on (the incremental passes, ``inbox.services.audit``), or one slice of a
full pass's walk (a day of the ledger); the bounds are written into the statement's text,
so each day's statement is planned over that day's partitions alone. The checks that look
at unfinished work (leases, event states) also read every unfinished row from ``floor``
(the ledger's floor: at most the lowest unfinished id), through the partial indexes that
keep those rows. A lookup from one ledger row into another table is bounded below by the
day its id carries (``(id >> 40) << 40``), so PostgreSQL prunes the older days' partitions
as it runs. The few rows a check reads whole (lane blocks, bulk replays, holds, repairs)
are read once per pass (``extras``), not once per day.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, TextClause, text

from inbox.domain import ledger
from inbox.domain.invariants import (
    LANE_RELEASING_STATES,
    NO_DELIVERY,
    OWED_DELIVERY_STATES,
    RETRY_HORIZON_DAYS,
    STALE_BLOCK,
    Found,
    Invariant,
)
from inbox.store.schema import holds
from inbox.store.schema.ledger_tables import PARTITIONED

N = Invariant


# No id reaches this: an ``until`` that bounds nothing, a ``floor`` that adds nothing.
NO_ID = 1 << 62


@dataclass(frozen=True, slots=True)
class Scope:
    """What one check reads: the ids ``since <= id < until`` of the table it scans (a day
    of the ledger, a slice of the intents, or everything from a watermark on), every
    unfinished row from the ledger's ``floor`` (``NO_ID``: none besides), the lease bound
    in seconds, and whether the parts of the check that are not sliced (few rows: lane
    blocks, bulk replays, holds, repairs) run too (``extras``)."""

    since: int = 0
    floor: int = 0
    lease_bound_s: float = 60.0
    until: int = NO_ID
    extras: bool = True

    @property
    def full(self) -> bool:
        return self.since == 0 and self.until == NO_ID and self.extras


# The table whose ids an invariant's ``:since`` names (its watermark is an id of it);
# None: the check reads few rows and always runs whole.
SCANS: dict[Invariant, str | None] = {
    N.EVENT_STATE: "events",
    N.LEASE_RECLAIMED: None,  # unfinished leases only, through their partial indexes
    N.STEP_ONCE: "events",
    N.DELIVERY_PER_ENDPOINT: "callback_intents",
    N.WEBHOOK_ID_ONE_BODY: "deliveries",
    N.LANE_ORDER: "events",
    N.PARTITIONS_AHEAD: None,
    N.HELD_NOT_PRUNED: None,  # legal holds are few; it starts from them
    N.OPERATOR_AUDITED: "events",
}

_DAY = "((({id}) >> 40) << 40)"  # the first id of the day the id carries


def _day_of(expr: str) -> str:
    return _DAY.format(id=expr)


# No row's id is past tomorrow's day (ids carry the database clock's day): a lookup bounded
# by it is not planned over the week of partitions made ahead.
_BEFORE_DAY_AFTER_TOMORROW = (
    "((CAST(floor(extract(epoch FROM now()) / 86400) AS bigint) + 2) << 40)"
)


# The scope's bounds are written into the text as constants (``check``), as the claims' are
# (inbox.store.db.days): every plan of a check over one day is planned over that day's
# partitions alone, whichever connection prepared it.
SINCE, UNTIL, FLOOR, EXTRAS = "{since}", "{until}", "{floor}", "{extras}"

_IN_SCOPE = (
    f"((e.id >= {SINCE} AND e.id < {UNTIL})"
    f" OR (e.id >= {FLOOR} AND e.state IN ('received', 'processing')))"
)

_EVENT_ROW = """jsonb_build_object('table', 'events', 'id', {e}.id, 'public_id', {e}.public_id,
    'state', {e}.state, 'attempts', {e}.attempts, 'replay', {e}.replay,
    'lease_owner', {e}.lease_owner, 'lease_expires_at', {e}.lease_expires_at,
    'available_at', {e}.available_at, 'received_at', {e}.received_at,
    'finished_at', {e}.finished_at, 'held_reason', {e}.held_reason)"""


def _event_row(alias: str) -> str:
    return _EVENT_ROW.format(e=alias)


# An event's columns must agree with its one state: the first disagreement is the problem.
_EVENT_PROBLEM = """CASE
    WHEN e.state = 'processing' AND (e.lease_owner IS NULL OR e.lease_expires_at IS NULL)
         THEN 'processing without a lease'
    WHEN e.state <> 'processing' AND (e.lease_owner IS NOT NULL OR e.lease_expires_at IS NOT NULL)
         THEN 'a lease on an event that is not processing'
    WHEN e.state IN ('completed', 'quarantined', 'filtered') AND e.finished_at IS NULL
         THEN 'finished without a finish time'
    WHEN e.state IN ('received', 'processing') AND e.finished_at IS NOT NULL
         THEN 'unfinished with a finish time'
    WHEN e.held_reason IS NOT NULL AND e.state <> 'received'
         THEN 'held but not waiting'
    WHEN e.state = 'completed' AND e.outcome IS NULL THEN 'completed without an outcome'
    WHEN e.state = 'filtered' AND e.filter_reason IS NULL THEN 'filtered without a reason'
END"""

_EVENT_STATE = text(
    f"""
    SELECT 'event:' || e.public_id AS subject, e.trace_id,
           jsonb_build_array({_event_row("e")} || jsonb_build_object('problem', p.problem)) AS rows
      FROM events e CROSS JOIN LATERAL (SELECT {_EVENT_PROBLEM} AS problem) p
     WHERE {_IN_SCOPE} AND p.problem IS NOT NULL
     ORDER BY e.id
    """
)

# Expired and not reclaimed past the bound; each through its partial index (the sweep's).
_LEASES = text(
    f"""
    SELECT 'event:' || e.public_id AS subject, e.trace_id,
           jsonb_build_array({_event_row("e")} || jsonb_build_object('problem',
               'lease expired ' || round(extract(epoch FROM now() - e.lease_expires_at))
               || ' s ago and not reclaimed')) AS rows
      FROM events e
     WHERE e.id >= :floor AND e.state = 'processing'
       AND e.lease_expires_at < now() - make_interval(secs => :bound)
    UNION ALL
    SELECT 'delivery:' || d.public_id, NULL,
           jsonb_build_array(jsonb_build_object('table', 'deliveries', 'id', d.id,
               'public_id', d.public_id, 'endpoint_id', d.endpoint_id, 'state', d.state,
               'lease_owner', d.lease_owner, 'lease_expires_at', d.lease_expires_at,
               'problem', 'lease expired '
               || round(extract(epoch FROM now() - d.lease_expires_at))
               || ' s ago and not reclaimed'))
      FROM deliveries d
     WHERE d.id >= :floor AND d.state = 'sending'
       AND d.lease_expires_at < now() - make_interval(secs => :bound)
    """
)

# Two outcomes: an event quarantined more often than it was replayed (each quarantine
# after the first needs an operator's replay between), or completed after a quarantine
# with no replay since. Two effects: a once-per-business-key effect owned by one event,
# and run by another event of the same source and type (same playbook), whose step
# result is not the duplicate's skip.
_STEP_ONCE = text(
    f"""
    SELECT 'event:' || e.public_id AS subject, e.trace_id,
           jsonb_build_array({_event_row("e")} || jsonb_build_object('problem',
               q.n || ' quarantines for ' || e.replay || ' replays, now ' || e.state))
           || q.rows AS rows
      FROM events e
     CROSS JOIN LATERAL (
           SELECT count(*) AS n,
                  coalesce(jsonb_agg(jsonb_build_object('table', 'event_attempts',
                      'event_id', a.event_id, 'attempt', a.attempt, 'at', a.at,
                      'outcome', a.outcome) ORDER BY a.id), '[]'::jsonb) AS rows
             FROM event_attempts a
            WHERE a.event_id = e.id AND a.outcome = 'quarantined') q
     WHERE e.id >= {SINCE} AND e.id < {UNTIL}
       AND q.n > e.replay + CASE WHEN e.state = 'quarantined' THEN 1 ELSE 0 END
    UNION ALL
    SELECT 'effect:' || f.name || ':' || y.public_id, y.trace_id,
           jsonb_build_array(
               jsonb_build_object('table', 'effects', 'name', f.name,
                   'owner_event_id', f.event_id, 'owner_public_id', x.public_id),
               jsonb_build_object('table', 'steps', 'event_id', s.event_id,
                   'public_id', y.public_id, 'name', s.name, 'completed_at', s.completed_at,
                   'problem', 'ran an effect another event of its business key owns'))
      FROM events y
      JOIN steps s ON s.event_id = y.id
      JOIN effects f ON f.tenant_id = y.tenant_id
                    AND f.business_key_digest = y.business_key_digest
                    AND f.event_id <> y.id
                    AND f.name LIKE '%.' || s.name
      JOIN events x ON x.id = f.event_id AND x.source_id = y.source_id
                   AND x.event_type IS NOT DISTINCT FROM y.event_type
     WHERE y.id >= {SINCE} AND y.id < {UNTIL} AND s.event_id >= {SINCE} AND s.event_id < {UNTIL}
       AND y.business_key_digest IS NOT NULL
       AND s.result->>'skipped' IS NULL
    """
)

# Each intent: exactly one delivery with its webhook-id, in a state that owes it. A delivery
# is written on its event's day or later: the lookup starts at that day.
_DELIVERY_PER_ENDPOINT = text(
    f"""
    SELECT 'intent:' || i.public_id AS subject, ev.trace_id,
           jsonb_build_array(jsonb_build_object('table', 'callback_intents',
               'public_id', i.public_id, 'endpoint_id', i.endpoint_id,
               'endpoint_enabled', ep.enabled, 'event_id', i.event_id,
               'event_public_id', ev.public_id, 'step', i.step, 'event_type', i.event_type,
               'created_at', i.created_at,
               'problem', CASE WHEN d.n = 0 THEN '{NO_DELIVERY}'
                               WHEN d.n > 1 THEN d.n || ' deliveries for one intent'
                               ELSE 'its delivery is in a state that does not owe it' END))
           || d.rows AS rows
      FROM callback_intents i
      LEFT JOIN endpoints ep ON ep.id = i.endpoint_id
      LEFT JOIN events ev ON ev.id = i.event_id
      CROSS JOIN LATERAL (
           SELECT count(*) AS n, count(*) FILTER (WHERE x.state = ANY(:owed)) AS owed,
                  coalesce(jsonb_agg(jsonb_build_object('table', 'deliveries', 'id', x.id,
                      'public_id', x.public_id, 'endpoint_id', x.endpoint_id,
                      'state', x.state) ORDER BY x.id), '[]'::jsonb) AS rows
             FROM deliveries x
            WHERE x.public_id = i.public_id
              AND x.id >= {_day_of("coalesce(i.event_id, 0)")}
              AND x.id < {_BEFORE_DAY_AFTER_TOMORROW}) d
     WHERE i.id >= {SINCE} AND i.id < {UNTIL} AND NOT (d.n = 1 AND d.owed = 1)
       -- An intent whose event's day retention dropped (its deliveries' days went
       -- first or with it) owes nothing any more; the full pass prunes it.
       AND (i.event_id IS NULL OR ev.id IS NOT NULL)
     ORDER BY i.id
    """
)

# A webhook-id attempted with two bodies (a delivery written twice, differently).
_WEBHOOK_ID = text(
    f"""
    SELECT DISTINCT ON (d.public_id) 'webhook:' || d.public_id AS subject,
           NULL::text AS trace_id,
           jsonb_build_array(
               jsonb_build_object('table', 'deliveries', 'id', d.id, 'public_id', d.public_id,
                   'state', d.state, 'attempts', d.attempts,
                   'body_sha256', encode(sha256(d.body), 'hex')),
               jsonb_build_object('table', 'deliveries', 'id', o.id, 'public_id', o.public_id,
                   'state', o.state, 'attempts', o.attempts,
                   'body_sha256', encode(sha256(o.body), 'hex'),
                   'problem', 'the same webhook-id sent with another body')) AS rows
      FROM deliveries d
      JOIN deliveries o ON o.public_id = d.public_id AND o.id <> d.id
                       AND o.id >= {_day_of("coalesce(d.event_id, 0)")}
                       AND o.id < {_BEFORE_DAY_AFTER_TOMORROW}
                       AND o.attempts > 0 AND o.body <> d.body
     WHERE d.id >= {SINCE} AND d.id < {UNTIL} AND d.attempts > 0
     ORDER BY d.public_id, d.id
    """
)

# What the rows record of an event having run: each step's commit and each failed
# attempt (both stamped with their transaction's start). Point these at new columns
# (a lane's start, a claim time) when the rows record more.
LANE_KEY = "ordering_key"
LANE_RUNS = f"""
    SELECT s.completed_at AS at, 'step ' || s.name AS what FROM steps s
     WHERE s.event_id = e.id AND s.event_id >= {SINCE} AND s.event_id < {UNTIL}
    UNION ALL
    SELECT a.at, 'failed attempt ' || a.attempt FROM event_attempts a
     WHERE a.event_id = e.id AND a.event_id >= {SINCE} AND a.event_id < {UNTIL}
"""
# How far back a lane's predecessor is looked for, in days before the event's own.
LANE_DAYS_BACK = 7

# An event of a lane ran (a step committed, an attempt failed) while an earlier event of
# its lane was unfinished: received before it ran, and not finished in a state that
# releases the lane until after it ran. A predecessor since replayed is left out: its
# finish time is the replay's, not the one the lane saw.
_LANE_ORDER = text(
    f"""
    SELECT DISTINCT ON (e.id) 'lane:' || e.public_id AS subject, e.trace_id,
           jsonb_build_array(
               {_event_row("e")} || jsonb_build_object('ran', r.what, 'ran_at', r.at),
               {_event_row("p")} || jsonb_build_object('problem',
                   'an earlier event of the lane was unfinished when it ran')) AS rows
      FROM events e
     CROSS JOIN LATERAL ({LANE_RUNS}) r
      JOIN events p ON p.tenant_id = e.tenant_id AND p.{LANE_KEY} = e.{LANE_KEY}
                   AND p.business_key_digest = e.business_key_digest
                   AND p.id < e.id AND p.id >= ((e.id >> 40) - {LANE_DAYS_BACK}) << 40
     WHERE e.id >= {SINCE} AND e.id < {UNTIL} AND e.{LANE_KEY} IS NOT NULL AND p.replay = 0
       AND p.received_at < r.at
       AND (p.state <> ALL(:releasing) OR p.finished_at > r.at)
       -- a quarantined predecessor holds the lane unless an operator skipped it before
       -- the run (or it was quarantined before lanes blocked: no lane_blocks row at all)
       AND NOT (p.state = 'quarantined' AND (
             EXISTS (SELECT 1 FROM lane_blocks b WHERE b.event_id = p.id
                      AND b.skipped_at <= r.at)
             OR (p.finished_at <= r.at
                 AND NOT EXISTS (SELECT 1 FROM lane_blocks b WHERE b.event_id = p.id))))
     ORDER BY e.id, r.at
    """
)

# A lane held by a block that no longer justifies it: a ``lane_blocks`` row, not skipped,
# whose event is not quarantined (the trigger that deletes it as the event leaves
# quarantine did not run: a restore, a replica's apply, a hand-made change) or is gone. The
# lane's later events wait behind it for ever. Few rows: read whole, with the extras.
_STALE_BLOCKS = text(
    f"""
    SELECT '{STALE_BLOCK}' || coalesce(e.public_id, CAST(b.event_id AS text)) AS subject,
           e.trace_id,
           jsonb_build_array(jsonb_build_object('table', 'lane_blocks',
               'tenant_id', b.tenant_id, 'lane', encode(b.lane, 'hex'), 'event_id', b.event_id,
               'since', b.since, 'waiting', w.n,
               'problem', CASE WHEN e.id IS NULL THEN 'blocks its lane, but its event is gone'
                               ELSE 'blocks its lane, but its event is ' || e.state END))
           || CASE WHEN e.id IS NULL THEN '[]'::jsonb
                   ELSE jsonb_build_array({_event_row("e")}) END AS rows
      FROM lane_blocks b
      LEFT JOIN events e ON e.id = b.event_id
     CROSS JOIN LATERAL (
           SELECT count(*) AS n FROM events x
            WHERE x.tenant_id = b.tenant_id AND x.{LANE_KEY} = b.lane AND x.id > b.event_id
              AND x.state IN ('received', 'processing')) w
     WHERE b.skipped_at IS NULL AND (e.id IS NULL OR e.state <> 'quarantined')
     ORDER BY b.event_id
    """
)

# A legal hold's data pruned: a held event's body removed though no operator redacted it
# and the hold came while the body had to be kept (before the source's body retention, at
# least a day, ran out); or an event a hold names by id gone.
_HELD_NOT_PRUNED = text(
    f"""
    SELECT 'hold:' || h.public_id || ':' || e.public_id AS subject, e.trace_id,
           jsonb_build_array(
               jsonb_build_object('table', 'legal_holds', 'public_id', h.public_id,
                   'scope', h.scope, 'created_at', h.created_at),
               {_event_row("e")} || jsonb_build_object('problem',
                   'its body was removed while a legal hold covers it')) AS rows
      FROM events e JOIN sources s ON s.id = e.source_id
      JOIN LATERAL (SELECT h.* FROM {holds.covering("e")} ORDER BY h.id LIMIT 1) h ON true
     WHERE e.body IS NULL
       AND h.created_at < e.received_at
           + make_interval(days => coalesce(CAST(s.options->>'retention_days' AS int), 1))
       AND NOT EXISTS (SELECT 1 FROM audit_log a WHERE a.subject_kind = 'event'
                        AND a.subject_id = e.id AND a.action = 'redacted')
    UNION ALL
    SELECT 'hold:' || h.public_id, NULL,
           jsonb_build_array(jsonb_build_object('table', 'legal_holds',
               'public_id', h.public_id, 'scope', h.scope, 'event_id', h.event_id,
               'event_public_id', h.event_public_id,
               'problem', 'the event it holds is gone'))
      FROM legal_holds h
     WHERE h.released_at IS NULL AND h.scope = 'event'
       AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = h.event_id)
    """
)

# Every operator action has its audit row: each replay of an event, each review of a bulk
# replay, each legal hold placed or released, each repair proposed and reviewed.
_OPERATOR_AUDITED = text(
    f"""
    SELECT 'event:' || e.public_id AS subject, e.trace_id,
           jsonb_build_array({_event_row("e")} || jsonb_build_object('problem',
               e.replay || ' replays, ' || a.n || ' audited')) AS rows
      FROM events e
     CROSS JOIN LATERAL (SELECT count(*) AS n FROM audit_log a WHERE a.subject_kind = 'event'
                          AND a.subject_id = e.id AND a.action = 'replay') a
     WHERE e.id >= {SINCE} AND e.id < {UNTIL} AND e.replay > 0 AND a.n < e.replay
    UNION ALL
    SELECT 'bulk_replay:' || b.public_id, NULL,
           jsonb_build_array(jsonb_build_object('table', 'bulk_replays',
               'public_id', b.public_id, 'status', b.status, 'reviewer', b.reviewer,
               'problem', 'reviewed with no audit row'))
      FROM bulk_replays b
     WHERE {EXTRAS} AND b.reviewer IS NOT NULL AND NOT EXISTS (SELECT 1 FROM audit_log a
           WHERE a.subject_kind = 'bulk_replay' AND a.subject_id = b.id
             AND a.action IN ('approve', 'reject'))
    UNION ALL
    SELECT 'legal_hold:' || h.public_id, NULL,
           jsonb_build_array(jsonb_build_object('table', 'legal_holds',
               'public_id', h.public_id, 'placed_by', h.placed_by,
               'released_by', h.released_by, 'problem', 'placed or released with no audit row'))
      FROM legal_holds h
     WHERE {EXTRAS} AND (NOT EXISTS (SELECT 1 FROM audit_log a
                        WHERE a.subject_kind = 'legal_hold' AND a.subject_id = h.id
                          AND a.action = 'hold_placed')
        OR (h.released_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM audit_log a
            WHERE a.subject_kind = 'legal_hold' AND a.subject_id = h.id
              AND a.action = 'hold_released')))
    UNION ALL
    SELECT 'repair:' || r.public_id, NULL,
           jsonb_build_array(jsonb_build_object('table', 'invariant_repairs',
               'public_id', r.public_id, 'status', r.status, 'proposed_by', r.proposed_by,
               'reviewer', r.reviewer, 'problem', 'proposed or reviewed with no audit row'))
      FROM invariant_repairs r
     WHERE {EXTRAS} AND (NOT EXISTS (SELECT 1 FROM audit_log a
                        WHERE a.subject_kind = 'invariant_repair' AND a.subject_id = r.id
                          AND a.action = 'repair_proposed')
        OR (r.reviewer IS NOT NULL AND NOT EXISTS (SELECT 1 FROM audit_log a
            WHERE a.subject_kind = 'invariant_repair' AND a.subject_id = r.id
              AND a.action IN ('repair_applied', 'repair_rejected'))))
    """
)

_STATEMENTS: dict[Invariant, tuple[TextClause, ...]] = {
    N.EVENT_STATE: (_EVENT_STATE,),
    N.LEASE_RECLAIMED: (_LEASES,),
    N.STEP_ONCE: (_STEP_ONCE,),
    N.DELIVERY_PER_ENDPOINT: (_DELIVERY_PER_ENDPOINT,),
    N.WEBHOOK_ID_ONE_BODY: (_WEBHOOK_ID,),
    N.LANE_ORDER: (_LANE_ORDER, _STALE_BLOCKS),
    N.HELD_NOT_PRUNED: (_HELD_NOT_PRUNED,),
    N.OPERATOR_AUDITED: (_OPERATOR_AUDITED,),
}

# The statements read whole (no slice of a table in them): with the extras alone.
_EXTRAS_ONLY = frozenset({_STALE_BLOCKS})


def _bounded(stmt: TextClause, scope: Scope) -> TextClause:
    """``stmt`` with the scope's bounds written in (``SINCE``, ``UNTIL``, ``FLOOR``)."""
    sql = stmt.text
    if "{" not in sql:
        return stmt
    for token, value in (
        (SINCE, str(scope.since)),
        (UNTIL, str(scope.until)),
        (FLOOR, str(scope.floor)),
        (EXTRAS, "true" if scope.extras else "false"),
    ):
        sql = sql.replace(token, value)
    return text(sql)


def check(conn: Connection, invariant: Invariant, scope: Scope) -> list[Found]:
    """The violations of ``invariant`` within ``scope``."""
    if invariant is N.PARTITIONS_AHEAD:
        return partitions_missing(conn)
    params: dict[str, Any] = {
        "floor": scope.floor,
        "bound": scope.lease_bound_s,
        "owed": list(OWED_DELIVERY_STATES),
        "releasing": [str(s) for s in LANE_RELEASING_STATES],
    }
    out: list[Found] = []
    for stmt in _STATEMENTS[invariant]:
        if stmt in _EXTRAS_ONLY and not scope.extras:
            continue
        rows = conn.execute(_bounded(stmt, scope), params)
        out += [Found(invariant, r.subject, list(r.rows), r.trace_id) for r in rows]
    return out


# A full pass walks a table a slice at a time: a ledger table a day at a time (its
# partition), the intents this many ids at a time.
INTENT_SLICE = 50_000


def next_slice(conn: Connection, table: str, start: int) -> tuple[int, int] | None:
    """The next slice of ``table`` with a row at or past ``start`` (``lo <= id < hi``), or
    None: the walk is over. A day with no rows is skipped, not walked."""
    first = conn.execute(text(f"SELECT min(id) FROM {table} WHERE id >= :s"), {"s": start}).scalar()
    if first is None:
        return None
    if table == "callback_intents":
        return int(first), int(first) + INTENT_SLICE
    return ledger.day_span(int(first), int(first))


# The furthest day work is due on (a retry, or a delivery's), capped by the retry horizon.
_FURTHEST_DUE = text(
    """
    SELECT CAST(now() AT TIME ZONE 'UTC' AS date) AS today,
           CAST(greatest(
               (SELECT max(available_at) FROM events
                 WHERE id >= :floor AND state = 'received' AND held_reason IS NULL),
               (SELECT max(available_at) FROM deliveries
                 WHERE id >= :floor AND state = 'pending'),
               now()) AT TIME ZONE 'UTC' AS date) AS furthest
    """
)


def required_days(conn: Connection, floor: int = 0) -> list[dt.date]:
    """Today, tomorrow, and every day up to the furthest retry due (within the horizon)."""
    row = conn.execute(_FURTHEST_DUE, {"floor": floor}).one()
    today: dt.date = row.today
    last = min(
        max(row.furthest, today + dt.timedelta(days=1)),
        today + dt.timedelta(days=RETRY_HORIZON_DAYS),
    )
    return [today + dt.timedelta(days=n) for n in range((last - today).days + 1)]


def partitions_missing(conn: Connection, floor: int = 0) -> list[Found]:
    """A ledger table's partition missing for a day that work will be written on."""
    names = [ledger.partition_name(t, d) for d in required_days(conn, floor) for t in PARTITIONED]
    present = {
        r.name
        for r in conn.execute(
            text(
                "SELECT c.relname AS name FROM pg_class c"
                " WHERE c.relname = ANY(:names) AND c.relispartition"
            ),
            {"names": names},
        )
    }
    return [
        Found(
            N.PARTITIONS_AHEAD,
            f"partition:{name}",
            [{"table": "pg_class", "partition": name, "problem": "missing"}],
        )
        for name in names
        if name not in present
    ]


def highest_id(conn: Connection, table: str, floor: int) -> int:
    """The highest id of ``table`` now (ledger tables: from the floor's day on)."""
    if table == "callback_intents":
        return int(
            conn.execute(text("SELECT coalesce(max(id), 0) FROM callback_intents")).scalar_one()
        )
    stmt = text(f"SELECT coalesce(max(id), 0) FROM {table} WHERE id >= :floor")
    return int(conn.execute(stmt, {"floor": floor}).scalar_one())


def first_id_since(conn: Connection, table: str, at: dt.datetime) -> int:
    """The lowest id of ``table`` a pass "since ``at``" reads from."""
    if table == "callback_intents":
        stmt = text("SELECT coalesce(min(id), 0) FROM callback_intents WHERE created_at >= :at")
        found = int(conn.execute(stmt, {"at": at}).scalar_one())
        return found or int(highest_id(conn, table, 0)) + 1
    return max(1, ledger.bounds(at.astimezone(dt.UTC).date())[0])


@dataclass(frozen=True, slots=True)
class Violation:
    """An open (or resolved) violation as stored: what the console and the CLI list."""

    id: int
    invariant: str
    subject: str
    rows: Any  # JSON: a list of objects, one per row involved
    trace_id: str | None
    first_seen_at: dt.datetime
    last_seen_at: dt.datetime
    resolved_at: dt.datetime | None

    def public(self) -> dict[str, Any]:
        from inbox.domain.invariants import MEANING

        return {
            "id": self.id,
            "invariant": self.invariant,
            "meaning": MEANING[Invariant(self.invariant)],
            "subject": self.subject,
            "rows": self.rows,
            "trace_id": self.trace_id,
            "first_seen_at": self.first_seen_at.isoformat(),
            "last_seen_at": self.last_seen_at.isoformat(),
            "resolved_at": self.resolved_at.isoformat() if self.resolved_at else None,
        }


_VIOLATION_COLUMNS = (
    "id, invariant, subject, rows, trace_id, first_seen_at, last_seen_at, resolved_at"
)


def open_violations(conn: Connection, invariant: str | None = None) -> list[Violation]:
    """Every open violation (of one invariant), oldest first."""
    rows = conn.execute(
        text(
            f"SELECT {_VIOLATION_COLUMNS} FROM invariant_violations WHERE resolved_at IS NULL"
            " AND (CAST(:inv AS text) IS NULL OR invariant = :inv) ORDER BY id"
        ),
        {"inv": invariant},
    )
    return [Violation(**r._mapping) for r in rows]


def violation(conn: Connection, violation_id: int) -> Violation | None:
    row = conn.execute(
        text(f"SELECT {_VIOLATION_COLUMNS} FROM invariant_violations WHERE id = :id"),
        {"id": violation_id},
    ).first()
    return None if row is None else Violation(**row._mapping)


@dataclass(frozen=True, slots=True)
class OpenCount:
    invariant: str
    count: int


def open_counts(conn: Connection) -> list[OpenCount]:
    """Open violations per invariant (every invariant, zero included): the gauge."""
    found: dict[str, int] = dict(
        conn.execute(
            text(
                "SELECT invariant, count(*) FROM invariant_violations"
                " WHERE resolved_at IS NULL GROUP BY invariant"
            )
        ).all()
    )
    return [OpenCount(i.value, int(found.get(i.value, 0))) for i in Invariant]


@dataclass(frozen=True, slots=True)
class PendingRepair:
    """A repair proposed and waiting for a second operator."""

    public_id: str
    violation_id: int
    kind: str
    preview: dict[str, Any]
    proposed_by: str
    created_at: dt.datetime


def pending_repairs(conn: Connection) -> list[PendingRepair]:
    rows = conn.execute(
        text(
            "SELECT public_id, violation_id, kind, preview, proposed_by, created_at"
            " FROM invariant_repairs WHERE status = 'awaiting_approval' ORDER BY id"
        )
    )
    return [PendingRepair(**r._mapping) for r in rows]
