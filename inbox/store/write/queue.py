"""Leases over the inbox: claim, record steps, finish, retry, quarantine, sweep.

Every write that advances or finishes an event is fenced: it names the fence
token its claim returned and applies only while that lease is still live by the
database clock. A worker whose lease expired, or was taken over, commits nothing.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain import failures, ledger
from inbox.domain.errors import LeaseLost
from inbox.domain.lanes import PARKED_UNTIL
from inbox.domain.outcomes import RunOutcome
from inbox.domain.records import Claim, EventId, LoadedEvent, SourceId, TenantId
from inbox.domain.states import EventState
from inbox.store.db import lane_sql, sealing
from inbox.store.db.days import OPEN_DAYS, DayBounded, open_days

# Fair across tenants: tenants are visited in random order and each gives at most
# :per_tenant times its weight (``tenants.weight``) due events, so one tenant's backlog
# cannot fill every batch; what is left of the batch is then filled oldest-first from the
# tenants without an in-flight cap. A tenant with a cap (``tenants.max_in_flight``) gives
# no more than its cap less its events running now (counted by ``ix_events_leases``: the
# running events of every tenant, a few hundred at most). SKIP LOCKED lets
# concurrent drainers take disjoint rows. An event whose source processes one
# business key at a time (its lane, ordering_key) waits while an earlier event of its
# lane is unfinished (earlier in the lane's order, position then id: an index probe that
# stops at the lane's first unfinished event, ``inbox.store.db.lane_sql``; a separate
# clause, as an OR here turns it into a scan of the lane), while any event of its lane
# runs (a skipped blocker replayed after its lane moved on, or an event that arrived late
# for its position, waits for the one running), and while an earlier event of its lane is
# quarantined and neither replayed nor skipped (``lane_blocks``, written by a trigger as
# the event is quarantined: a primary-key probe, whatever the blocker's day). The attempt
# is counted here, in the claiming transaction, so an event that kills its worker every
# time still runs out of attempts.
_DUE = (
    """
    ev.state = 'received' AND ev.available_at <= now()
    AND (ev.ordering_key IS NULL OR (NOT EXISTS ("""
    + lane_sql.earlier("p", "ev")
    + """)
         AND NOT EXISTS (
          SELECT 1 FROM events r
           WHERE r.tenant_id = ev.tenant_id AND r.ordering_key = ev.ordering_key
             AND r.id >= {lo} AND r.id < {hi} AND r.state = 'processing')
         AND NOT EXISTS (
          SELECT 1 FROM lane_blocks b
           WHERE b.tenant_id = ev.tenant_id AND b.lane = ev.ordering_key
             AND b.event_id < ev.id AND b.skipped_at IS NULL)))
"""
)
# ``{lo}`` and ``{hi}`` everywhere events is named (inbox.store.db.days): from the floor's day
# to tomorrow's, constants in the text, so every plan of the claim (custom or generic)
# covers those days alone: planning or locking a year of daily partitions costs far more
# than running the claim.
_IN_DAYS = "ev.id >= {lo} AND ev.id < {hi}"
_CLAIM = DayBounded(
    f"""
    WITH fair AS (
        SELECT e.id
          FROM (SELECT id, weight, max_in_flight FROM tenants WHERE NOT disabled
                 ORDER BY random()) t
         CROSS JOIN LATERAL (
               SELECT ev.id FROM events ev
                WHERE ev.tenant_id = t.id AND {_IN_DAYS} AND {_DUE}
                ORDER BY ev.available_at, ev.id
                LIMIT least(:per_tenant * t.weight, CASE
                    WHEN t.max_in_flight IS NULL THEN :limit
                    WHEN NOT t.id = ANY(CAST(:capped AS bigint[])) THEN 0
                    ELSE greatest(0, t.max_in_flight - (
                        SELECT count(*) FROM events f
                         WHERE f.state = 'processing' AND f.tenant_id = t.id
                           AND f.id >= {{lo}} AND f.id < {{hi}}))
                    END)
                FOR UPDATE SKIP LOCKED
         ) e
         LIMIT :limit
    ), fill AS (
        SELECT ev.id FROM events ev
         WHERE {_IN_DAYS} AND {_DUE} AND ev.id NOT IN (SELECT id FROM fair)
           AND ev.tenant_id NOT IN (SELECT id FROM tenants WHERE max_in_flight IS NOT NULL)
         ORDER BY ev.available_at, ev.id
         LIMIT :limit - (SELECT count(*) FROM fair)
           FOR UPDATE SKIP LOCKED
    ), picked AS (
        SELECT id FROM fair UNION ALL SELECT id FROM fill
    )
    UPDATE events ev
       SET state = 'processing',
           lease_owner = :owner,
           lease_expires_at = now() + make_interval(secs => :lease),
           fence = ev.fence + 1,
           attempts = ev.attempts + 1
     WHERE {_IN_DAYS} AND ev.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING ev.id, ev.fence
    """
)


# What the sweep counts as due, by the claim's own rules: an event the claim would pass over
# (behind its lane's unfinished event or blocker) is not due, so a sweep that finds only
# such events rings no drain.
_DUE_COUNT = DayBounded(f"SELECT count(*) FROM events ev WHERE {_IN_DAYS} AND {_DUE}")


def due_count(conn: Connection) -> int:
    """How many events the claim would take now (the sweep rings the drain for them)."""
    return int(conn.execute(_DUE_COUNT.over(*open_days(conn))).scalar_one())


# The lifeline of parking (migration 0031): a parked event that no unfinished event and no
# open blocker of its lane stands before is made due. The trigger that finishes a lane's
# event does this in its own commit, and intake parks only under a share lock on the row it
# parks behind, so this finds nothing unless that promise broke; each one found is counted
# and logged by the sweep (``inbox.services.sweep``).
_ORPHANS = DayBounded(
    f"""
    UPDATE events SET available_at = now()
     WHERE id >= {{lo}} AND id < {{hi}} AND id IN (
        SELECT ev.id FROM events ev
         WHERE {_IN_DAYS} AND ev.state = 'received' AND ev.ordering_key IS NOT NULL
           AND ev.available_at = CAST('{PARKED_UNTIL}' AS timestamptz)
           AND NOT EXISTS ({lane_sql.earlier("p", "ev")})
           AND NOT EXISTS (
               SELECT 1 FROM lane_blocks b
                WHERE b.tenant_id = ev.tenant_id AND b.lane = ev.ordering_key
                  AND b.event_id < ev.id AND b.skipped_at IS NULL)
         LIMIT 1000
         FOR UPDATE SKIP LOCKED)
    """
)


def unpark_orphans(conn: Connection) -> int:
    """Parked events with nothing before them in their lane made due; how many."""
    return int(conn.execute(_ORPHANS.over(*open_days(conn))).rowcount)


# A lane advances on its predecessor's commit (truth 15): in the transaction that finishes
# events of lanes (``complete``, ``inbox.store.write.batch.complete_many``, a skip), the
# next unfinished event of each lane after them is made due when it is parked (and no open
# blocker stands before it). A statement of its own, after the one that finished them: its
# snapshot sees every event parked behind them, as the intake parks under a share lock on
# the predecessor, which the finishing UPDATE waited for. The lane's next event is found by
# the lane's index (``inbox.store.db.lane_sql``), from the finished events' day to tomorrow's
# (by this process's clock, a day's margin).
_ADVANCE = DayBounded(
    f"""
    UPDATE events ev SET available_at = now()
      FROM (SELECT d.tenant_id, d.ordering_key, d.lane_position, d.id FROM events d
             WHERE d.id = ANY(CAST(:ids AS bigint[])) AND d.id >= {{lo}} AND d.id < {{hi}}
               AND d.ordering_key IS NOT NULL) f
     CROSS JOIN LATERAL (
           SELECT n.id FROM events n
            WHERE {lane_sql.same_lane("n", "f")}
              AND n.id >= {{lo}} AND n.id < {{hi}} AND {lane_sql.before("n", ">", "f")}
              AND n.state IN ('received', 'processing')
            ORDER BY {lane_sql.ORDERED.format(t="n")} LIMIT 1) h
     WHERE ev.id = h.id AND {_IN_DAYS}
       AND ev.state = 'received' AND ev.available_at = CAST('{PARKED_UNTIL}' AS timestamptz)
       AND NOT EXISTS (
           SELECT 1 FROM lane_blocks b
            WHERE b.tenant_id = ev.tenant_id AND b.lane = ev.ordering_key
              AND b.event_id < ev.id AND b.skipped_at IS NULL)
    """
)


def advance(conn: Connection, finished: list[EventId]) -> int:
    """Each lane's next event after these finished (or skipped) ones made due when it was
    parked; how many."""
    if not finished:
        return 0
    tomorrow = (int(time.time() // 86400) + 1) << ledger.DAY_SHIFT
    stmt = _ADVANCE.over(min(finished), max(max(finished), tomorrow))
    return int(conn.execute(stmt, {"ids": finished}).rowcount)


def floor(conn: Connection) -> int:
    """At most the lowest id of an unfinished event or delivery (0 when the row is missing)."""
    return open_days(conn)[0]


# What the claim is sized and bounded by, in one round trip: the tenants it visits, the
# days it looks at (inbox.store.db.days.OPEN_DAYS), and the capped tenants this claim may
# serve. A capped tenant's running events are counted by the claim's own statement; two
# claims at once would both count the same running events and each take the cap's last
# place. So a claim serves a capped tenant only under a transaction-scoped advisory lock
# of that tenant's, taken here, before the claim's statement (and its snapshot): the next
# claim to take it starts after this one committed, and counts what this one took. A
# claim that finds the lock taken leaves the tenant to the one holding it (no wait).
_CLAIM_BOUNDS = text(
    "SELECT (SELECT coalesce(sum(weight), 0) FROM tenants WHERE NOT disabled) AS weights,"
    " (SELECT coalesce(array_agg(c.id), '{}') FROM (SELECT id FROM tenants"
    "   WHERE max_in_flight IS NOT NULL AND NOT disabled ORDER BY id OFFSET 0) c"
    "  WHERE pg_try_advisory_xact_lock(hashtext('inbox.tenant_cap'), c.id::int)) AS capped,"
    f" {OPEN_DAYS}"
)


def claim(conn: Connection, owner: str, limit: int, lease_seconds: float) -> list[Claim]:
    bounds = conn.execute(_CLAIM_BOUNDS).one()
    per_tenant = max(1, -(-limit // max(1, int(bounds.weights))))  # per unit of weight
    params = {
        "owner": owner,
        "limit": limit,
        "per_tenant": per_tenant,
        "lease": lease_seconds,
        "capped": list(bounds.capped),
    }
    rows = conn.execute(_CLAIM.over(int(bounds.floor), int(bounds.tomorrow)), params)
    return sorted((Claim(r.id, r.fence) for r in rows), key=lambda c: c.id)


# Raising the floor: the row is locked first, so a replay in flight (of an event or a
# delivery: it lowers the floor in its own statement, holding that lock until it commits)
# is seen by the next statement's snapshot. No higher than the start of the day an hour
# ago: a row whose id was made just before midnight may commit just after, unseen by this
# snapshot, and ids are made from the database's clock; no transaction is open for an
# hour (statement_timeout).
_RAISE_FLOOR = text(
    """
    UPDATE ledger_floor SET floor = least(
        (SELECT min(id) FROM events WHERE state IN ('received', 'processing')),
        (SELECT min(id) FROM deliveries WHERE state IN ('pending', 'sending')),
        floor(extract(epoch FROM now() - interval '1 hour') / 86400)::bigint << 40)
    """
)


def raise_floor(conn: Connection) -> int:
    """Set the floor to the lowest unfinished id (the sweep runs it); the new floor. Run it
    in a transaction of its own: the row stays locked until that commits."""
    conn.execute(text("INSERT INTO ledger_floor (floor) VALUES (0) ON CONFLICT DO NOTHING"))
    conn.execute(text("SELECT floor FROM ledger_floor FOR UPDATE"))
    conn.execute(_RAISE_FLOOR)
    return floor(conn)


# ``key_live``: whether the payload's key is live (sealing.live), read in the same statement.
LOAD_COLUMNS = (
    """
    SELECT e.id, e.public_id, e.tenant_id, t.name AS tenant, s.name AS source,
           s.options AS source_options, e.event_type, e.business_key_digest, e.content_type,
           e.body, e.key_id, """
    + sealing.live("e")
    + """ AS key_live, e.attempts, e.max_attempts, e.sync, e.replay, e.trace_context,
           e.ordering_key, t.max_in_flight IS NOT NULL AS capped,
           extract(epoch FROM clock_timestamp() - e.received_at) AS age_seconds,
           coalesce((SELECT jsonb_object_agg(st.name, st.result) FROM steps st
                      WHERE st.event_id = e.id AND st.event_id >= {lo} AND st.event_id < {hi}),
                    '{}'::jsonb) AS steps,
           """
    + sealing.steps_sealed("e", "{lo}", "{hi}")
    + """ AS steps_sealed
"""
)
# Every statement that names events (or steps) by a claim or a batch of them is bounded by
# their days, ``{lo}`` and ``{hi}`` (inbox.store.db.days): planned over those days alone, not
# over every daily partition.
_LOAD = DayBounded(
    LOAD_COLUMNS
    + """
      FROM events e
      JOIN tenants t ON t.id = e.tenant_id
      JOIN sources s ON s.id = e.source_id
     WHERE e.id = :id AND e.id >= {lo} AND e.id < {hi}
       AND e.fence = :fence AND e.state = 'processing'
    """
)


def load(conn: Connection, c: Claim) -> LoadedEvent:
    row = conn.execute(_LOAD.over(c.id, c.id), {"id": c.id, "fence": c.fence}).first()
    if row is None:
        raise LeaseLost()
    return to_loaded(conn, row)


def to_loaded(conn: Connection, row: Any) -> LoadedEvent:
    """A loaded row, its body opened (a payload whose key was destroyed: ``erased``)."""
    keys = sealing.for_engine(conn.engine)
    opened = keys.open(conn, row.key_id, row.body, None, None, row.key_live)
    if not opened.erased:  # its step results and decision are stored as its payload is
        keys.loaded(row.id, None if row.key_id is None else keys.key_by_id(conn, row.key_id))
    return LoadedEvent(
        id=row.id,
        public_id=row.public_id,
        tenant_id=row.tenant_id,
        tenant=row.tenant,
        source=row.source,
        source_options=row.source_options,
        event_type=row.event_type,
        business_key_digest=(
            bytes(row.business_key_digest) if row.business_key_digest is not None else None
        ),
        content_type=row.content_type,
        body=opened.body if opened.body is not None else b"",
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        sync=row.sync,
        replay=row.replay,
        steps={} if opened.erased else keys.open_steps(conn, row.steps, row.steps_sealed),
        age_seconds=float(row.age_seconds),
        trace_context=row.trace_context,
        lane=bytes(row.ordering_key) if row.ordering_key is not None else None,
        erased=opened.erased,
        capped=bool(row.capped),
    )


# One claim's event, bounded by its day (inbox.store.db.days), while its lease is live.
_LIVE = (
    "id = :id AND id >= {lo} AND id < {hi}"
    " AND fence = :fence AND state = 'processing' AND lease_expires_at > now()"
)

# Record completed steps (a recovery point) only while the lease is live; extend the
# lease in the same statement so long playbooks keep it.
_STEP = DayBounded(
    f"""
    WITH live AS (
        UPDATE events SET lease_expires_at = now() + make_interval(secs => :lease)
         WHERE {_LIVE}
        RETURNING id, attempts, replay
    )
    -- completed_at a microsecond apart, in run order (see write/batch.py)
    INSERT INTO steps (event_id, name, result, key_id, attempt, replay, completed_at)
    SELECT live.id, s.name, CAST(s.result AS jsonb), CAST(:key AS bigint), live.attempts,
           live.replay, now() - (count(*) OVER (PARTITION BY live.id) - s.n) * interval '1 us'
      FROM live, json_each(CAST(:steps AS json)) WITH ORDINALITY AS s(name, result, n)
    ON CONFLICT (event_id, name) DO NOTHING
    RETURNING name
    """
)


_CHECK_LIVE = DayBounded(f"SELECT 1 FROM events WHERE {_LIVE}")


def _check_live(conn: Connection, c: Claim) -> None:
    live = conn.execute(_CHECK_LIVE.over(c.id, c.id), {"id": c.id, "fence": c.fence})
    if live.first() is None:
        raise LeaseLost()


def record_steps(conn: Connection, c: Claim, results: dict[str, Any], lease: float) -> None:
    """Commit step results as recovery points; raises LeaseLost if the lease is gone."""
    if not results:
        _check_live(conn, c)
        return
    sealed, key = sealing.for_engine(conn.engine).seal_steps(conn, c.id, results)
    params = {"id": c.id, "fence": c.fence, "lease": lease, "steps": json.dumps(sealed), "key": key}
    written = conn.execute(_STEP.over(c.id, c.id), params).fetchall()
    if not written:
        _check_live(conn, c)  # either no lease, or every step was already recorded


def claim_effect(conn: Connection, c: Claim, tenant_id: TenantId, name: str, bk: bytes) -> EventId:
    """Claim a once-per-business-key effect; returns the id of the event that owns it."""
    owner = conn.execute(
        text(
            """
            WITH ins AS (
                INSERT INTO effects (tenant_id, name, business_key_digest, event_id)
                VALUES (:tenant_id, :name, :bk, :id)
                ON CONFLICT DO NOTHING RETURNING event_id
            )
            SELECT event_id FROM ins
            UNION ALL
            SELECT event_id FROM effects
             WHERE tenant_id = :tenant_id AND name = :name AND business_key_digest = :bk
            LIMIT 1
            """
        ),
        {"tenant_id": tenant_id, "name": name, "bk": bk, "id": c.id},
    ).scalar_one()
    return EventId(owner)


_COMPLETE = DayBounded(
    f"""
    UPDATE events
       SET state = 'completed', outcome = :outcome, decision = CAST(:decision AS jsonb),
           duplicate_of = :dup, finished_at = now(),
           lease_owner = NULL, lease_expires_at = NULL,
           last_error_class = NULL, last_error_message = NULL,
           response_status = CASE WHEN CAST(:resp AS bytea) IS NULL
                                  THEN response_status ELSE 200 END,
           response_body = coalesce(CAST(:resp AS bytea), response_body)
     WHERE {_LIVE}
    RETURNING ordering_key IS NOT NULL AS laned
    """
)


def complete(
    conn: Connection,
    c: Claim,
    outcome: RunOutcome,
    decision: dict[str, Any],
    duplicate_of: EventId | None,
    sync_response: bytes | None,
) -> None:
    """Finish the event. A synchronous event's stored response becomes the decision (sealed
    under the event's key where its payload is)."""
    keys = sealing.for_engine(conn.engine)
    if sync_response is not None:
        sync_response = keys.seal_tagged(conn, c.id, str(c.id), sync_response, sealing.RESPONSE)
    result = conn.execute(
        _COMPLETE.over(c.id, c.id),
        {
            "id": c.id,
            "fence": c.fence,
            "outcome": outcome,
            "decision": json.dumps(keys.seal_decision(conn, c.id, decision)),
            "dup": duplicate_of,
            "resp": sync_response,
        },
    ).first()
    if result is None:
        raise LeaseLost()
    if result.laned:
        advance(conn, [c.id])


_FAIL = DayBounded(
    f"""
    WITH failed AS (
        UPDATE events
           SET state = CASE WHEN :permanent OR attempts >= max_attempts
                            THEN 'quarantined' ELSE 'received' END,
               available_at = now() + make_interval(secs => :delay),
               finished_at = CASE WHEN :permanent OR attempts >= max_attempts
                                  THEN now() END,
               lease_owner = NULL, lease_expires_at = NULL,
               last_error_class = :cls, last_error_message = :msg
         WHERE {_LIVE}
        RETURNING id, attempts, state
    ), kept AS (
        INSERT INTO event_attempts
               (event_id, attempt, step, error_class, error_message, traceback, outcome)
        SELECT id, attempts, :step, :cls, :msg, :tb,
               CASE WHEN state = 'quarantined' THEN 'quarantined' ELSE 'retry' END
          FROM failed
    )
    SELECT state FROM failed
    """
)


def fail(
    conn: Connection,
    c: Claim,
    error: BaseException,
    permanent: bool,
    delay: float,
    step: str | None = None,
) -> str:
    """Retry later (database-scheduled), or quarantine when permanent or out of attempts.

    The attempt is kept in ``event_attempts`` (step, error, redacted traceback), so the
    history survives the next attempt and any replay.
    """
    row = conn.execute(
        _FAIL.over(c.id, c.id),
        {
            "id": c.id,
            "fence": c.fence,
            "permanent": permanent,
            "delay": delay,
            "cls": type(error).__name__,
            "msg": failures.redact(str(error), failures.MESSAGE_LIMIT),
            "step": step,
            "tb": failures.traceback_excerpt(error),
        },
    ).first()
    if row is None:
        raise LeaseLost()
    return str(row.state)


# A held event is received but never due (this far-off time) until it is released; the
# attempt its claim counted is given back: holding is not a failure of the event.
HELD_UNTIL = "9999-01-01 00:00:00+00"
_HOLD = DayBounded(
    f"""
    UPDATE events
       SET state = 'received', available_at = CAST('{HELD_UNTIL}' AS timestamptz),
           attempts = greatest(attempts - 1, 0), held_reason = :reason,
           lease_owner = NULL, lease_expires_at = NULL,
           last_error_class = 'PlaybookMissing', last_error_message = :reason
     WHERE {_LIVE}
    """
)


def hold(conn: Connection, c: Claim, reason: str) -> str:
    """Hold the claimed event (its playbook is not registered) until ``release_held``."""
    result = conn.execute(_HOLD.over(c.id, c.id), {"id": c.id, "fence": c.fence, "reason": reason})
    if result.rowcount != 1:
        raise LeaseLost()
    return HELD


HELD = "held"


# Held events are unfinished, so they lie in the open days (from the floor to tomorrow):
# the statement names those days alone, as the claim does (and as
# ``inbox.store.reads.queue.held_playbooks`` does).
_RELEASE = DayBounded(
    """
    UPDATE events SET available_at = now(), held_reason = NULL,
           last_error_class = NULL, last_error_message = NULL
     WHERE held_reason IS NOT NULL AND state = 'received'
       AND source_id = ANY(CAST(:ids AS bigint[])) AND id >= {lo} AND id < {hi}
    """
)


def release_held(conn: Connection, source_ids: list[SourceId]) -> int:
    """Held events of these sources become due now, their hold's reason cleared (it was
    never a failure of the event); returns how many."""
    if not source_ids:
        return 0
    result = conn.execute(_RELEASE.over(*open_days(conn)), {"ids": source_ids})
    return int(result.rowcount)


def sweep_expired(conn: Connection) -> tuple[int, int]:
    """Expired leases go back to received, or to quarantine when out of attempts.

    Returns (requeued, quarantined).
    """
    rows = conn.execute(
        text(
            """
            WITH swept AS (
                UPDATE events
                   SET state = CASE WHEN attempts >= max_attempts
                                    THEN 'quarantined' ELSE 'received' END,
                       finished_at = CASE WHEN attempts >= max_attempts THEN now() END,
                       available_at = now(),
                       last_error_class = 'LeaseExpired',
                       last_error_message = 'the worker holding the lease stopped or stalled',
                       lease_owner = NULL, lease_expires_at = NULL
                 WHERE state = 'processing' AND lease_expires_at <= now()
                RETURNING id, attempts, state, last_error_class, last_error_message
            ), kept AS (
                INSERT INTO event_attempts (event_id, attempt, error_class, error_message, outcome)
                SELECT id, attempts, last_error_class, last_error_message,
                       CASE WHEN state = 'quarantined' THEN 'quarantined' ELSE 'retry' END
                  FROM swept
            )
            SELECT state FROM swept
            """
        )
    ).fetchall()
    quarantined = sum(1 for r in rows if r.state == EventState.QUARANTINED)
    return len(rows) - quarantined, quarantined


_EXTEND = DayBounded(
    """
    UPDATE events SET lease_expires_at = now() + make_interval(secs => :lease)
     WHERE (id, fence) IN (SELECT * FROM unnest(CAST(:ids AS bigint[]),
                                                CAST(:fences AS bigint[])))
       AND id >= {lo} AND id < {hi}
       AND state = 'processing' AND lease_expires_at > now()
    """
)


def extend(conn: Connection, claims: list[Claim], lease_seconds: float) -> int:
    """Extend the live leases among ``claims`` (a batch still waiting its turn)."""
    if not claims:
        return 0
    ids = [c.id for c in claims]
    result = conn.execute(
        _EXTEND.spanning(ids),
        {"lease": lease_seconds, "ids": ids, "fences": [c.fence for c in claims]},
    )
    return int(result.rowcount)
