"""Callback intents: what a step owes each subscribed endpoint, recorded beside its deliveries.

``enqueue`` is the work store's ``enqueue_deliveries``: in the step's own transaction, in
one statement, it records one ``callback_intents`` row per callback and endpoint subscribed
to its type (the endpoint's event types and filter say so; enabled or not: an endpoint's
state decides when a callback is attempted, never whether it is owed) and writes the
deliveries (``inbox.store.write.deliveries.plan``). The self-audit compares the two
(``inbox.domain.invariants.Invariant.DELIVERY_PER_ENDPOINT``): a delivery missing for
an intent, or two for one, is a violation. Each intent keeps its delivery's envelope
(sealed as the event's payload is), so the repair can write a missing delivery, held.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.callbacks import Outgoing
from inbox.domain.records import EndpointId, EventId, TenantId
from inbox.store.db import sealing
from inbox.store.write import deliveries

# The intents and their deliveries in one statement (one round trip, in the step's
# transaction): ``input`` is the planned rows (``deliveries.plan``); each intent keeps the
# envelope as ``kept`` (sealed under the event's key when its payload is sealed), so a
# delivery found missing can be written again from it. A delivery whose webhook-id exists
# already (on its event's day or later) is not written twice; an intent recorded already is
# left as it is.
_RECORD_AND_WRITE = text(
    """
    WITH input AS (
        SELECT * FROM unnest(CAST(:p AS text[]), CAST(:e AS bigint[]), CAST(:type AS text[]),
                             CAST(:body AS bytea[]), CAST(:state AS text[]),
                             CAST(:kept AS bytea[]))
               AS r(public_id, endpoint_id, event_type, body, state, kept)
    ), recorded AS (
        INSERT INTO callback_intents (public_id, tenant_id, endpoint_id, event_id, step,
                                      event_type, body, key_id, replay, trace_context)
        SELECT public_id, :t, endpoint_id, CAST(:ev AS bigint), :step, event_type, kept,
               CAST(:key AS bigint), :replay, CAST(:tc AS text)
          FROM input
        ON CONFLICT (public_id) DO NOTHING
    )
    INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type, body,
                            replay, trace_context, state)
    SELECT r.public_id, :t, r.endpoint_id, CAST(:ev AS bigint), r.event_type, r.body, :replay,
           CAST(:tc AS text), r.state
      FROM input r
     WHERE NOT EXISTS (SELECT FROM deliveries d WHERE d.public_id = r.public_id AND d.id >= :lo)
    """
)


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
    """Record the intents and write the deliveries, in the caller's transaction; the
    endpoint ids to ring."""
    rows = deliveries.plan(
        conn, tenant_id, tenant, event_id, event_public_id, step, messages, replay
    )
    if not rows:
        return set()
    conn.execute(_RECORD_AND_WRITE, _params(conn, event_id, step, rows))
    return deliveries.to_ring(rows)


def _params(
    conn: Connection, event_id: EventId | None, step: str, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    key = None if event_id is None else sealing.for_engine(conn.engine).event_key(conn, event_id)
    first = rows[0]
    return {
        "p": [r["p"] for r in rows],
        "e": [r["e"] for r in rows],
        "type": [r["type"] for r in rows],
        "body": [r["body"] for r in rows],
        "state": [r["state"] for r in rows],
        "kept": [
            r["body"] if key is None else key.seal(r["body"], sealing.INTENT + r["p"]) for r in rows
        ],
        "key": None if key is None else key.id,
        "t": first["t"],
        "ev": event_id,
        "step": step,
        "replay": first["replay"],
        "tc": first["tc"],
        "lo": first["lo"],
    }


def kept_body(conn: Connection, key_id: int | None, public_id: str, kept: bytes) -> bytes | None:
    """An intent's envelope in clear; None when the key it is sealed under was destroyed
    (the payload was erased: there is nothing to write the delivery from)."""
    if key_id is None:
        return bytes(kept)
    key = sealing.for_engine(conn.engine).key_by_id(conn, key_id)
    return None if key is None else key.open(bytes(kept), sealing.INTENT + public_id)


# Intents outlive nothing they describe: once their event's day is dropped by retention
# (its deliveries' days go no later), the full pass deletes them, a batch at a time.
_PRUNE = text(
    """
    DELETE FROM callback_intents WHERE id IN (
        SELECT i.id FROM callback_intents i
         WHERE i.created_at < now() - interval '1 day'
           AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = i.event_id)
         ORDER BY i.id LIMIT :limit)
    """
)


def prune(conn: Connection, limit: int = 10_000) -> int:
    """Delete intents whose event is gone (its day dropped); returns how many."""
    return int(conn.execute(_PRUNE, {"limit": limit}).rowcount)
