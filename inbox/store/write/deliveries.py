"""Deliveries: the outbox rows, their leases, attempts, dead letters and replays."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.circuit import CircuitState
from inbox.domain.records import (
    ClaimedDelivery,
    CourierRound,
    DeliveryAttempt,
    DeliveryId,
    Endpoint,
    EndpointId,
    TenantId,
)
from inbox.infra import envelope
from inbox.store.db import sealing
from inbox.store.db.days import LOWER_FLOOR, DayBounded
from inbox.store.write import circuit, courier_round, endpoint_rate, ordered

Leases = Callable[[Endpoint], float]  # a claim's lease, in seconds, for its endpoint

_SUBSCRIBERS = text(
    "SELECT id, tenant_id, event_types, filter, enabled AND NOT paused AS sends"
    " FROM endpoints WHERE tenant_id = ANY(:ts) AND deleted_at IS NULL ORDER BY id"
)


def subscribers(conn: Connection, tenant_ids: Collection[TenantId]) -> dict[TenantId, list[Any]]:
    """Every endpoint of these tenants, whatever its state, in id order, by tenant: a
    paused or disabled one's deliveries are written held (sent when it is enabled again),
    never dropped. A deleted one is no longer an endpoint: nothing is made for it."""
    eps: dict[TenantId, list[Any]] = {}
    for ep in conn.execute(_SUBSCRIBERS, {"ts": sorted(tenant_ids)}):
        eps.setdefault(TenantId(ep.tenant_id), []).append(ep)
    return eps


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
    (the circuit is half open until it answers); otherwise none. Waits for the endpoint's
    row lock; the courier's ``claim_round`` does not."""
    opened = courier_round.open_endpoint(conn, endpoint_id)
    assert opened is not None  # a waiting read finds the row or raises NotFound
    return claim_opened(conn, opened, owner, limit, lease).claims


def claim_round(
    conn: Connection, endpoint_id: EndpointId, owner: str, limit: int, lease_for: Leases
) -> CourierRound | None:
    """A courier's claim (``claim``) from one locked read of the endpoint, its lease
    ``lease_for`` the endpoint; None at once when another transaction holds the
    endpoint's row (not waited for)."""
    opened = courier_round.open_endpoint(conn, endpoint_id, wait=False)
    if opened is None:
        return None
    return claim_opened(conn, opened, owner, limit, lease_for(opened.endpoint))


def claim_opened(
    conn: Connection, opened: courier_round.Opened, owner: str, limit: int, lease: float
) -> CourierRound:
    """The claim over the endpoint's row as ``opened`` read it (locked since)."""
    endpoint_id, now = opened.endpoint.id, opened.circuit
    probe = now.state != CircuitState.CLOSED
    if probe and (now.probe_in is None or now.probe_in > 0):
        return CourierRound(opened.endpoint, now, [], _next_token(opened))
    bucket = None if probe else opened.bucket(limit)
    if bucket is not None:
        limit = bucket.allowed
        if not limit:
            return CourierRound(opened.endpoint, now, [], bucket.wait)
    params = {"e": endpoint_id, "owner": owner, "limit": limit, "lease": lease}
    days = opened.days
    if not probe and opened.endpoint.ordered:  # one at a time, in order
        rows = ordered.claim(conn, endpoint_id, owner, limit, lease, days)
    else:
        rows = list(conn.execute((_PROBE if probe else _CLAIM).over(*days), params))
    keys = sealing.for_engine(conn.engine)  # bodies sealed under their event's key
    gone = sealing.destroyed(conn, [bytes(r.body) for r in rows])  # erased since: not sent
    if probe and rows:
        circuit.probing(conn, endpoint_id, lease)
        now = replace(now, state=CircuitState.HALF_OPEN, probe_in=lease)
    if bucket is not None:
        endpoint_rate.spend(conn, endpoint_id, bucket, len(rows))
    if not rows:
        # A spent bucket kept the tokens it did not lease: the next one is there now.
        wait = None if bucket is not None else _next_token(opened)
        return CourierRound(opened.endpoint, now, [], wait)
    claims = sorted(
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
    return CourierRound(opened.endpoint, now, claims)


def _next_token(opened: courier_round.Opened) -> float | None:
    bucket = opened.bucket(1)
    return bucket.wait if bucket is not None else None


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
           AND NOT EXISTS (SELECT FROM endpoints e  -- a deleted endpoint is sent nothing
                            WHERE e.id = deliveries.endpoint_id AND e.deleted_at IS NOT NULL)
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
