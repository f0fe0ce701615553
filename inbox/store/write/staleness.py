"""Judging an event against the newest completed event with its business key.

The judgement is made under a transaction-scoped advisory lock on (tenant, business
key), so two workers judging two events about one business object take turns. Under
the lock an event proceeds only if no other event with that key is processing (with a
live lease) and already judged; otherwise it goes back to the queue for a moment and
the one already running finishes first. So, of two out-of-order events released
together, exactly one order wins: either the older runs to completion before the
newer is judged (both run), or the newer completes first and the older is stale.
The event's own position is written in the same transaction, which is what makes
"already judged" visible to the next holder of the lock.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from inbox.domain.errors import LeaseLost
from inbox.domain.ordering import RETRY_SECONDS, Judgement, Newer, Position, lock_key
from inbox.domain.records import Claim, TenantId
from inbox.store.reads.preview import NEWEST_COMPLETED

_LIVE = "id = :id AND fence = :fence AND state = 'processing' AND lease_expires_at > now()"
_RUNNING = text(
    """
    SELECT 1 FROM events
     WHERE tenant_id = :t AND business_key_digest = :bk AND id <> :id
       AND state = 'processing' AND lease_expires_at > now()
       AND (occurred_at IS NOT NULL OR version IS NOT NULL)
     LIMIT 1
    """
)


def judge(conn: Connection, c: Claim, tenant_id: TenantId, bk: bytes, mine: Position) -> Judgement:
    """Judge one claimed event (see the module docstring); commit with the caller."""
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_key(tenant_id, bk)})
    keys = {"t": tenant_id, "bk": bk, "id": c.id, "fence": c.fence}
    if conn.execute(_RUNNING, keys).first() is not None:
        # Back to the queue; the claim's attempt is given back, it did not run.
        put_back = conn.execute(
            text(
                f"""
                UPDATE events
                   SET state = 'received', attempts = greatest(attempts - 1, 0),
                       available_at = now() + make_interval(secs => :delay),
                       lease_owner = NULL, lease_expires_at = NULL
                 WHERE {_LIVE}
                """
            ),
            {**keys, "delay": RETRY_SECONDS},
        )
        if put_back.rowcount != 1:
            raise LeaseLost()
        return Judgement(busy=True)
    column = "occurred_at" if mine.occurred_at is not None else "version"
    row = conn.execute(NEWEST_COMPLETED[column], keys).first()
    newest = Position(row.occurred_at, row.version) if row is not None else None
    newer = (
        Newer(row.public_id, row.occurred_at, row.version)
        if row is not None and newest is not None and newest.newer_than(mine)
        else None
    )
    written = conn.execute(
        text(
            f"UPDATE events SET occurred_at = :o, version = :v, newer_event_id = :n WHERE {_LIVE}"
        ),
        {
            **keys,
            "o": mine.occurred_at,
            "v": mine.version,
            "n": row.id if newer is not None and row is not None else None,
        },
    )
    if written.rowcount != 1:
        raise LeaseLost()
    return Judgement(newer=newer)
