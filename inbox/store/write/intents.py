"""Callback intents: what a step owes each subscribed endpoint, recorded beside its deliveries.

``enqueue`` is the work store's ``enqueue_deliveries``: in the step's own transaction it
records one ``callback_intents`` row per callback and endpoint subscribed to its type
(the endpoint's event types and filter say so; enabled or not: an endpoint's state
decides when a callback is attempted, never whether it is owed), then writes the
deliveries (``inbox.store.write.deliveries.enqueue``). The self-audit compares the two
(``inbox.domain.invariants.Invariant.DELIVERY_PER_ENDPOINT``): a delivery missing for
an intent, or two for one, is a violation.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from inbox.domain import callbacks, filters
from inbox.domain.callbacks import Outgoing
from inbox.domain.records import EndpointId, EventId, TenantId
from inbox.store.write import deliveries

_RECORD = text(
    "INSERT INTO callback_intents (public_id, tenant_id, endpoint_id, event_id, step,"
    " event_type) VALUES (:p, :t, :e, :ev, :step, :type) ON CONFLICT (public_id) DO NOTHING"
)


def record(
    conn: Connection,
    tenant_id: TenantId,
    event_id: EventId | None,
    event_public_id: str,
    step: str,
    messages: list[Outgoing],
) -> int:
    """Record the intents of ``messages`` in the caller's transaction; returns how many."""
    if not messages:
        return 0
    eps = conn.execute(
        text(
            "SELECT id, event_types, filter FROM endpoints"
            " WHERE tenant_id = :t AND deleted_at IS NULL ORDER BY id"  # deleted: owed nothing
        ),
        {"t": tenant_id},
    ).fetchall()
    rows = [
        {
            "p": callbacks.delivery_id(event_public_id, step, index, ep.id),
            "t": tenant_id,
            "e": ep.id,
            "ev": event_id,
            "step": step,
            "type": msg.event_type,
        }
        for index, msg in enumerate(messages)
        for ep in eps
        if (ep.event_types is None or msg.event_type in ep.event_types)
        and (ep.filter is None or filters.endpoint_matches(ep.filter, msg.event_type, msg.data))
    ]
    if rows:
        conn.execute(_RECORD, rows)
    return len(rows)


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
    """Record the intents, then write the deliveries; the endpoint ids to ring."""
    record(conn, tenant_id, event_id, event_public_id, step, messages)
    return deliveries.enqueue(
        conn, tenant_id, tenant, event_id, event_public_id, step, messages, replay
    )


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
