"""Ordered delivery: an endpoint that asks for it (``endpoints.ordered``) gets at most one
delivery in flight, and the next only once the previous is delivered or dead, in the
order they were made (by id), across every courier process.

The claim takes the endpoint's row lock first (``inbox.store.write.courier_round``), so each
statement here sees every other courier's committed claim. It takes the run of due
deliveries at the head of the endpoint's unfinished ones (pending or being sent, by id):
none while the head is being sent or waits for its retry. The courier sends the run one
after another and stops at the first that is not delivered or dead (``courier``), handing
the rest back. Rows another transaction holds are skipped, and the run is cut there: a
later delivery is never taken past an earlier one.
"""

from __future__ import annotations

from itertools import takewhile
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.records import EndpointId
from inbox.store.db.days import DayBounded

# The head of the endpoint's unfinished deliveries, in the order made (the partial index
# ix_deliveries_unfinished gives them by id); ``ready``: due and not being sent.
_HEAD = DayBounded(
    """
    SELECT d.id, (d.state = 'pending' AND d.available_at <= now()) AS ready
      FROM deliveries d
     WHERE d.endpoint_id = :e AND d.state IN ('pending', 'sending')
       AND d.id >= {lo} AND d.id < {hi}
       AND EXISTS (SELECT 1 FROM endpoints WHERE id = :e AND enabled AND NOT paused)
     ORDER BY d.id
     LIMIT :limit
    """
)

_LOCK = text(
    "SELECT id FROM deliveries WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'pending'"
    " FOR UPDATE SKIP LOCKED"
)

_TAKE = DayBounded(
    """
    UPDATE deliveries d
       SET state = 'sending', lease_owner = :owner,
           lease_expires_at = now() + make_interval(secs => :lease),
           fence = d.fence + 1, attempts = d.attempts + 1
     WHERE d.id = ANY(CAST(:ids AS bigint[])) AND d.id >= {lo} AND d.id < {hi}
    RETURNING d.id, d.fence, d.public_id, d.body, d.attempts, d.replay, d.trace_context
    """
)


def is_ordered(conn: Connection, endpoint_id: EndpointId) -> bool:
    return bool(
        conn.execute(
            text("SELECT ordered FROM endpoints WHERE id = :e"), {"e": endpoint_id}
        ).scalar()
    )


def claim(
    conn: Connection,
    endpoint_id: EndpointId,
    owner: str,
    limit: int,
    lease: float,
    days: tuple[int, int],
) -> list[Any]:
    """The due run at the head of the endpoint's unfinished deliveries, leased to
    ``owner``; empty while the head is being sent or waits for its retry."""
    head = conn.execute(_HEAD.over(*days), {"e": endpoint_id, "limit": limit}).fetchall()
    ready = [r.id for r in takewhile(lambda r: r.ready, head)]
    if not ready:
        return []
    locked = set(conn.execute(_LOCK, {"ids": ready}).scalars())
    run = list(takewhile(lambda i: i in locked, ready))
    if not run:
        return []
    params = {"ids": run, "owner": owner, "lease": lease}
    return list(conn.execute(_TAKE.spanning(run), params).fetchall())
