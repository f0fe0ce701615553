"""Callback intents: what a step owes each subscribed endpoint, recorded beside its deliveries.

``enqueue`` is the work store's ``enqueue_deliveries``: in the steps' own transaction it
records one ``callback_intents`` row per callback and endpoint subscribed to its type
(``inbox.domain.callbacks.route``: the endpoint's event types and filter; enabled or not),
then writes the deliveries (``inbox.store.write.deliveries.write``). The self-audit compares the two
(``inbox.domain.invariants.Invariant.DELIVERY_PER_ENDPOINT``): a delivery missing for
an intent, or two for one, is a violation.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, text

from inbox.domain import callbacks
from inbox.domain.records import EndpointId
from inbox.infra import metrics
from inbox.store.write import deliveries

_RECORD = text(
    """
    INSERT INTO callback_intents (public_id, tenant_id, endpoint_id, event_id, step, event_type)
    SELECT * FROM unnest(CAST(:p AS text[]), CAST(:t AS bigint[]), CAST(:e AS bigint[]),
                         CAST(:ev AS bigint[]), CAST(:step AS text[]), CAST(:type AS text[]))
        ON CONFLICT (public_id) DO NOTHING
    """
)


def record(conn: Connection, owed: Sequence[callbacks.Owed]) -> int:
    """Record one intent per owed delivery in the caller's transaction; returns how many."""
    if not owed:
        return 0
    conn.execute(
        _RECORD,
        {
            "p": [o.public_id for o in owed],
            "t": [o.cbs.tenant_id for o in owed],
            "e": [o.endpoint_id for o in owed],
            "ev": [o.cbs.event_id for o in owed],
            "step": [o.cbs.step for o in owed],
            "type": [o.message.event_type for o in owed],
        },
    )
    return len(owed)


def enqueue(conn: Connection, sets: Sequence[callbacks.CallbackSet]) -> set[EndpointId]:
    """The callbacks of every step a commit holds, in its transaction: the subscribed
    endpoints read once, the intents recorded, then the deliveries written, each in one
    statement whatever the number of events; the endpoint ids to ring."""
    sets = [cbs for cbs in sets if cbs.messages]
    if not sets:
        return set()
    eps = deliveries.subscribers(conn, {cbs.tenant_id for cbs in sets})
    owed, filtered = callbacks.fan_out(sets, eps)
    record(conn, owed)
    ring = deliveries.write(conn, owed, {ep.id: ep.sends for e in eps.values() for ep in e})
    for tenant, n in filtered.items():
        metrics.record_callbacks_filtered(tenant, n)
    return ring


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
