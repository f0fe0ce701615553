"""Deliveries: the outbox rows, their leases, attempts, dead letters and replays."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain import callbacks, filters, ledger
from inbox.domain.callbacks import Outgoing
from inbox.domain.circuit import CircuitState
from inbox.domain.records import (
    ClaimedDelivery,
    DeliveryAttempt,
    DeliveryId,
    EndpointId,
    EventId,
    TenantId,
)
from inbox.infra import envelope, metrics, tracing
from inbox.store.db import sealing
from inbox.store.db.days import LOWER_FLOOR, DayBounded, open_days
from inbox.store.write import circuit, endpoint_rate


def enqueue(
    conn: Connection,
    tenant_id: TenantId,
    tenant: str,
    event_id: EventId | None,
    event_public_id: str,
    step: str,
    messages: list[Outgoing],
    replay: int = 0,
) -> set[EndpointId]:
    """Write deliveries in the caller's transaction; returns the endpoint ids to ring.

    ``replay``: the event's replay number while the step ran (sent as ``webhook-replay``).
    """
    if not messages:
        return set()
    # Every endpoint of the tenant, whatever its state: a paused or disabled one's
    # deliveries are written held (sent when it is enabled again), never dropped.
    eps = conn.execute(
        text(
            "SELECT id, event_types, filter, enabled AND NOT paused AS sends FROM endpoints"
            " WHERE tenant_id = :t ORDER BY id"
        ),
        {"t": tenant_id},
    ).fetchall()
    # A delivery's public id is not unique across days (a partitioned table's unique index
    # would have to include the id), so a second write of the same delivery is refused
    # here: it can only be on the event's day or later, which prunes the look to those
    # days. The step's own row (written in this transaction, fenced) already keeps a step
    # from running twice; this is the backstop the unique index was.
    since = ledger.bounds(ledger.day_of(event_id))[0] if event_id is not None else 0
    trace_context = tracing.traceparent()  # the step's span: each attempt continues it
    keys = sealing.for_engine(conn.engine)  # bodies sealed under the event's key
    rows = []
    filtered = 0
    for index, msg in enumerate(messages):
        for ep in eps:
            if ep.event_types is not None and msg.event_type not in ep.event_types:
                continue
            if ep.filter is not None and not filters.endpoint_matches(
                ep.filter, msg.event_type, msg.data
            ):
                filtered += 1
                continue
            msg_id = callbacks.delivery_id(event_public_id, step, index, ep.id)
            body = keys.seal_tagged(
                conn,
                event_id,
                msg_id,
                callbacks.envelope(msg_id, msg.event_type, tenant, msg.data, msg.created_at),
                sealing.DELIVERY,
            )
            rows.append(
                {
                    "p": msg_id,
                    "t": tenant_id,
                    "e": ep.id,
                    "ev": event_id,
                    "type": msg.event_type,
                    "body": body,
                    "replay": replay,
                    "lo": since,
                    "tc": trace_context,
                    "state": "pending" if ep.sends else "held",
                }
            )
    if rows:
        conn.execute(
            text(
                "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type,"
                " body, replay, trace_context, state) SELECT CAST(:p AS text), :t, :e,"
                " CAST(:ev AS bigint), CAST(:type AS text), :body, :replay, CAST(:tc AS text),"
                " CAST(:state AS text)"
                " WHERE NOT EXISTS"
                " (SELECT FROM deliveries d WHERE d.public_id = :p AND d.id >= :lo)"
            ),
            rows,
        )
    if filtered:
        metrics.record_callbacks_filtered(tenant, filtered)
    return {EndpointId(r["e"]) for r in rows if r["state"] == "pending"}


# Claims for one endpoint are serialised by locking the endpoint's row; each claim
# is one "in-flight slot" (its deliveries go out one after another over one
# connection), and an endpoint never has more than max_in_flight live slots. A slow
# or dead endpoint therefore holds at most that many worker threads, and no other
# endpoint waits behind it. ``{lo}`` and ``{hi}`` (inbox.store.db.days): from the floor's
# day to tomorrow's, constants in the text, so no plan of it spans a year of days.
_CLAIM = DayBounded(
    """
    WITH ep AS (
        SELECT id, CASE WHEN failing THEN 1 ELSE max_in_flight END AS slots
          FROM endpoints WHERE id = :e AND enabled AND NOT paused FOR UPDATE
    ), slots AS (
        SELECT count(DISTINCT lease_owner) AS busy FROM deliveries
         WHERE endpoint_id = :e AND state = 'sending' AND lease_expires_at > now()
           AND id >= {lo} AND id < {hi}
    ), picked AS (
        -- The endpoint id is the parameter itself (not a join with `ep`), so the due
        -- index gives the rows in order without sorting the endpoint's whole backlog;
        -- the slot check is a one-time filter.
        SELECT d.id FROM deliveries d
         WHERE d.endpoint_id = :e AND d.state = 'pending' AND d.available_at <= now()
           AND d.id >= {lo} AND d.id < {hi}
           AND EXISTS (SELECT 1 FROM ep, slots WHERE slots.busy < ep.slots)
         ORDER BY d.available_at, d.id
         LIMIT :limit
           FOR UPDATE OF d SKIP LOCKED
    )
    UPDATE deliveries d
       SET state = 'sending', lease_owner = :owner,
           lease_expires_at = now() + make_interval(secs => :lease),
           fence = d.fence + 1, attempts = d.attempts + 1
     WHERE d.id = ANY(ARRAY(SELECT id FROM picked)) AND d.id >= {lo} AND d.id < {hi}
    RETURNING d.id, d.fence, d.public_id, d.body, d.attempts, d.replay, d.trace_context
    """
)


# While the circuit is open: one delivery, the oldest whatever its retry time, as the
# probe, and only when no other is being sent. Its attempt budget is not spent.
_PROBE = DayBounded(
    """
    WITH ep AS (
        SELECT id FROM endpoints WHERE id = :e AND enabled AND NOT paused FOR UPDATE
    ), picked AS (
        SELECT d.id FROM deliveries d
         WHERE d.endpoint_id = :e AND d.state = 'pending'
           AND d.id >= {lo} AND d.id < {hi}
           AND EXISTS (SELECT 1 FROM ep)
           AND NOT EXISTS (SELECT 1 FROM deliveries s
                            WHERE s.endpoint_id = :e AND s.state = 'sending'
                              AND s.lease_expires_at > now()
                              AND s.id >= {lo} AND s.id < {hi})
         ORDER BY d.id
         LIMIT 1
           FOR UPDATE OF d SKIP LOCKED
    )
    UPDATE deliveries d
       SET state = 'sending', lease_owner = :owner,
           lease_expires_at = now() + make_interval(secs => :lease), fence = d.fence + 1
     WHERE d.id = ANY(ARRAY(SELECT id FROM picked)) AND d.id >= {lo} AND d.id < {hi}
    RETURNING d.id, d.fence, d.public_id, d.body, d.attempts, d.replay, d.trace_context
    """
)


def claim(
    conn: Connection, endpoint_id: EndpointId, owner: str, limit: int, lease: float
) -> list[ClaimedDelivery]:
    """Up to ``limit`` due deliveries while the endpoint's circuit is closed (and its rate
    limit has tokens: one per delivery); while it is open, one probe when the probe is due
    (the circuit is half open until it answers); otherwise none."""
    now = circuit.read(conn, endpoint_id)  # the endpoint's row is locked from here
    probe = now.state != CircuitState.CLOSED
    if probe and (now.probe_in is None or now.probe_in > 0):
        return []
    bucket = None if probe else endpoint_rate.take(conn, endpoint_id, limit)
    if bucket is not None:
        limit = bucket.allowed
        if not limit:
            return []
    params = {"e": endpoint_id, "owner": owner, "limit": limit, "lease": lease}
    rows = conn.execute((_PROBE if probe else _CLAIM).over(*open_days(conn)), params).fetchall()
    keys = sealing.for_engine(conn.engine)  # bodies sealed under their event's key
    gone = sealing.destroyed(conn, [bytes(r.body) for r in rows])  # erased since: not sent
    if probe and rows:
        circuit.probing(conn, endpoint_id, lease)
    if bucket is not None:
        endpoint_rate.spend(conn, endpoint_id, bucket, len(rows))
    return sorted(
        (
            ClaimedDelivery(
                DeliveryId(r.id),
                r.fence,
                r.public_id,
                keys.open_tagged(
                    bytes(r.body), sealing.DELIVERY, envelope.tagged_key(bytes(r.body)) not in gone
                ),
                r.attempts,
                r.replay,
                r.trace_context,
                probe=probe,
            )
            for r in rows
        ),
        key=lambda c: c.id,
    )


_LIVE = "id = :id AND id >= {lo} AND id < {hi} AND fence = :fence AND state = 'sending'"


# One round's results at once: every delivery still leased to this courier gets its
# new state; every attempt is recorded (it happened, whether or not the lease held).
_FINISH_MANY = DayBounded(
    """
    WITH input AS (
        SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS i(
            id bigint, fence bigint, at timestamptz, state text, status int, error text,
            error_class text, delay float8, latency int, excerpt text)
    ), done AS (
        UPDATE deliveries d
           SET state = CASE WHEN i.state = 'pending' AND NOT (e.enabled AND NOT e.paused)
                            THEN 'held'
                            ELSE i.state END,
               last_status = i.status, last_error = i.error,
               available_at = now() + make_interval(secs => i.delay),
               finished_at = CASE WHEN i.state IN ('delivered', 'failed') THEN now() END,
               lease_owner = NULL, lease_expires_at = NULL
          FROM input i, endpoints e
         WHERE e.id = d.endpoint_id AND d.id = i.id AND d.fence = i.fence AND d.state = 'sending'
           AND d.id >= {lo} AND d.id < {hi}
        RETURNING d.id
    ), attempts AS (
        INSERT INTO delivery_attempts (delivery_id, at, status, error_class, latency_ms, excerpt)
        SELECT id, at, status, error_class, latency, excerpt FROM input
    )
    SELECT id FROM done
    """
)


def finish_many(conn: Connection, sent: Sequence[DeliveryAttempt]) -> set[DeliveryId]:
    """Record attempts and outcomes; returns the ids whose lease was still ours. A retry
    of an endpoint paused or disabled meanwhile is held."""
    rows = [
        {
            "id": s.claim.id,
            "fence": s.claim.fence,
            "at": s.at.isoformat(),
            "state": s.state,
            "status": s.status,
            "error": s.error,
            "error_class": s.error if s.status is None else None,
            "delay": s.delay,
            "latency": round(s.latency_ms),
            "excerpt": s.excerpt,
        }
        for s in sent
    ]
    stmt = _FINISH_MANY.spanning([s.claim.id for s in sent])
    return {DeliveryId(r.id) for r in conn.execute(stmt, {"rows": json.dumps(rows)})}


def set_failing(conn: Connection, endpoint_id: EndpointId, failing: bool) -> None:
    """A failing endpoint (unreachable last time) gets one courier until it answers."""
    conn.execute(
        text("UPDATE endpoints SET failing = :f WHERE id = :e AND failing IS DISTINCT FROM :f"),
        {"e": endpoint_id, "f": failing},
    )


_RELEASE = DayBounded(
    f"""
    UPDATE deliveries
       SET state = CASE WHEN (SELECT enabled AND NOT paused FROM endpoints e
                               WHERE e.id = deliveries.endpoint_id)
                        THEN 'pending' ELSE 'held' END,
           attempts = attempts - 1,
           available_at = now() + make_interval(secs => :delay),
           lease_owner = NULL, lease_expires_at = NULL
     WHERE {_LIVE}
    """
)


def release(conn: Connection, claims: list[ClaimedDelivery], delay: float) -> None:
    """Give back claimed deliveries that were not attempted (their attempt is not counted)."""
    if not claims:
        return
    conn.execute(
        _RELEASE.spanning([c.id for c in claims]),
        [{"id": c.id, "fence": c.fence, "delay": delay} for c in claims],
    )


def sweep(conn: Connection) -> list[EndpointId]:
    """Expired leases go back to pending (held while the endpoint is paused or disabled;
    failed when out of attempts).

    Returns the endpoints with due deliveries, to ring.
    """
    conn.execute(
        text(
            """
            UPDATE deliveries d
               SET state = CASE WHEN d.attempts >= e.max_attempts THEN 'failed'
                                WHEN e.enabled AND NOT e.paused THEN 'pending'
                                ELSE 'held' END,
                   finished_at = CASE WHEN d.attempts >= e.max_attempts THEN now() END,
                   last_error = coalesce(d.last_error, 'lease expired'),
                   lease_owner = NULL, lease_expires_at = NULL, available_at = now()
              FROM endpoints e
             WHERE e.id = d.endpoint_id AND d.state = 'sending' AND d.lease_expires_at <= now()
            """
        )
    )
    rows = conn.execute(
        text(
            "SELECT DISTINCT d.endpoint_id FROM deliveries d JOIN endpoints e"
            " ON e.id = d.endpoint_id WHERE e.enabled AND NOT e.paused AND d.state = 'pending'"
            " AND d.available_at <= now()"
        )
    )
    return [EndpointId(r.endpoint_id) for r in rows]


_REPLAY = text(
    f"""
    WITH moved AS (
        UPDATE deliveries
           SET state = 'pending', attempts = 0, available_at = now(), finished_at = NULL,
               last_error = NULL
         WHERE public_id = ANY(CAST(:ids AS text[])) AND state = 'failed'
        RETURNING id, public_id, endpoint_id
    ), lowered AS (  -- the couriers' claim looks no lower than the floor
        {LOWER_FLOOR}
    ), audited AS (
        INSERT INTO audit_log (actor, action, subject_kind, subject_id, detail)
        SELECT :actor, 'replay', 'delivery', id,
               jsonb_build_object('public_id', public_id) || CAST(:extra AS jsonb)
          FROM moved
    )
    SELECT public_id, endpoint_id FROM moved
    """
)


def replay(
    conn: Connection, public_ids: list[str], actor: str, detail: dict[str, Any] | None = None
) -> list[tuple[str, int]]:
    """Dead letters back to pending, with the same webhook-id; audited (with ``detail``)."""
    params = {"ids": public_ids, "actor": actor, "extra": json.dumps(detail or {})}
    return [(r.public_id, int(r.endpoint_id)) for r in conn.execute(_REPLAY, params)]
