"""Callback intents: what a step owes each subscribed endpoint, recorded beside its deliveries.

``enqueue`` is the work store's ``enqueue_deliveries``: in the steps' own transaction, in
one statement for the whole commit, it records one ``callback_intents`` row per callback
and endpoint subscribed to its type (``inbox.domain.callbacks.route``: the endpoint's event
types and filter; enabled or not: an endpoint's state decides when a callback is
attempted, never whether it is owed; a deleted endpoint is owed nothing) and writes the
deliveries. The self-audit compares the two
(``inbox.domain.invariants.Invariant.DELIVERY_PER_ENDPOINT``): a delivery missing for
an intent, or two for one, is a violation. Each intent keeps its delivery's envelope
(sealed as the event's payload is), so the repair can write a missing delivery, held.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain import callbacks, ledger
from inbox.domain.records import EndpointId
from inbox.infra import metrics
from inbox.store.db import sealing
from inbox.store.write import deliveries

# Every intent and delivery of a commit in one statement (one round trip, in the steps'
# transaction, whatever the number of events): ``input`` is one row per owed delivery;
# each intent keeps the envelope as ``kept`` (sealed under the event's key when its
# payload is sealed), so a delivery found missing can be written again from it. A delivery
# whose webhook-id exists already (on its event's day or later: ``lo``) is not written
# twice; an intent recorded already is left as it is.
_RECORD_AND_WRITE = text(
    """
    WITH input AS (
        SELECT * FROM unnest(CAST(:p AS text[]), CAST(:t AS bigint[]), CAST(:e AS bigint[]),
                             CAST(:ev AS bigint[]), CAST(:step AS text[]),
                             CAST(:type AS text[]), CAST(:body AS bytea[]),
                             CAST(:state AS text[]), CAST(:kept AS bytea[]),
                             CAST(:key AS bigint[]), CAST(:replay AS int[]),
                             CAST(:tc AS text[]), CAST(:lo AS bigint[]))
               AS r(public_id, tenant_id, endpoint_id, event_id, step, event_type, body,
                    state, kept, key_id, replay, trace_context, lo)
    ), recorded AS (
        INSERT INTO callback_intents (public_id, tenant_id, endpoint_id, event_id, step,
                                      event_type, body, key_id, replay, trace_context)
        SELECT public_id, tenant_id, endpoint_id, event_id, step, event_type, kept, key_id,
               replay, trace_context
          FROM input
        ON CONFLICT (public_id) DO NOTHING
    )
    INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type, body,
                            replay, trace_context, state)
    SELECT r.public_id, r.tenant_id, r.endpoint_id, r.event_id, r.event_type, r.body,
           r.replay, r.trace_context, r.state
      FROM input r
     WHERE NOT EXISTS (SELECT FROM deliveries d WHERE d.public_id = r.public_id AND d.id >= r.lo)
    """
)
_COLUMNS = ("p", "t", "e", "ev", "step", "type", "body", "state", "kept", "key", "replay")


def enqueue(conn: Connection, sets: Sequence[callbacks.CallbackSet]) -> set[EndpointId]:
    """Record the intents and write the deliveries of every callback set (the steps a
    commit holds), in the caller's transaction: the subscribed endpoints read once, then
    one statement; the endpoint ids to ring."""
    sets = [cbs for cbs in sets if cbs.messages]
    if not sets:
        return set()
    eps = deliveries.subscribers(conn, {cbs.tenant_id for cbs in sets})
    owed, filtered = callbacks.fan_out(sets, eps)
    for tenant, n in filtered.items():
        metrics.record_callbacks_filtered(tenant, n)
    if not owed:
        return set()
    sends = {ep.id: ep.sends for tenant_eps in eps.values() for ep in tenant_eps}
    cols: dict[str, list[Any]] = {k: [] for k in (*_COLUMNS, "tc", "lo")}
    # An event's key, looked up once for every delivery its callback sets owe.
    keys = sealing.for_engine(conn.engine)
    event_keys = {
        ev: keys.event_key(conn, ev) for ev in {o.cbs.event_id for o in owed} if ev is not None
    }
    for o in owed:
        cbs = o.cbs
        key = None if cbs.event_id is None else event_keys[cbs.event_id]
        plain = o.body()
        # The delivery's body names its key itself (the courier opens it by that); the
        # intent's copy is opened by its own key_id column.
        body = plain if key is None else key.seal_tagged(plain, sealing.DELIVERY, o.public_id)
        cols["p"].append(o.public_id)
        cols["t"].append(cbs.tenant_id)
        cols["e"].append(o.endpoint_id)
        cols["ev"].append(cbs.event_id)
        cols["step"].append(cbs.step)
        cols["type"].append(o.message.event_type)
        cols["body"].append(body)
        cols["state"].append("pending" if sends[o.endpoint_id] else "held")
        cols["kept"].append(plain if key is None else key.seal(plain, sealing.INTENT + o.public_id))
        cols["key"].append(None if key is None else key.id)
        cols["replay"].append(cbs.replay)
        cols["tc"].append(cbs.trace_context)
        cols["lo"].append(
            ledger.bounds(ledger.day_of(cbs.event_id))[0] if cbs.event_id is not None else 0
        )
    conn.execute(_RECORD_AND_WRITE, cols)
    return {o.endpoint_id for o in owed if sends[o.endpoint_id]}


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
