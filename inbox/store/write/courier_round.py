"""A courier's round opens with one statement: the endpoint, its circuit, its rate bucket
and the claim's day bounds, read together under the endpoint row's lock.

The claim (``inbox.store.write.deliveries``) then decides from what this read, without
reading the row again. A courier takes the lock with ``SKIP LOCKED``: when another
transaction holds the row (another courier's claim or record, an operator's pause) the
courier does not queue behind it; it finds no slot, and rings again a moment later
(``inbox.services.courier``). What is due is never lost: the holder's claim sees it, or
the next ring does. Direct callers of ``deliveries.claim`` wait for the lock as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain import throttle
from inbox.domain.circuit import Circuit, CircuitState, Window
from inbox.domain.errors import NotFound
from inbox.domain.records import Endpoint, EndpointId
from inbox.store.db.days import OPEN_DAYS
from inbox.store.reads.endpoints import to_endpoint

# The endpoint as ``inbox.store.reads.endpoints`` reads it (its tenant's name, its live
# secrets), the circuit's and the rate bucket's times from the database's clock, and the
# claims' day bounds (``OPEN_DAYS``): one round trip. ``FOR UPDATE OF e`` locks the
# endpoint's row alone, never the tenant's. With ``SKIP LOCKED`` a held row gives no
# ``locked`` row; ``present`` then tells a held endpoint from none, in the same statement.
_OPEN = """
    WITH locked AS (
        SELECT e.*, t.name AS tenant,
               coalesce((SELECT array_agg(s.secret) FROM endpoint_secrets s
                          WHERE s.endpoint_id = e.id AND s.revoked_at IS NULL), '{{}}')
                 AS secrets,
               extract(epoch FROM e.probe_at - now()) AS probe_in,
               extract(epoch FROM now()) AS clock,
               extract(epoch FROM now() - e.rate_at) AS rate_elapsed,
               {days}
          FROM endpoints e JOIN tenants t ON t.id = e.tenant_id
         WHERE e.id = :e
           FOR UPDATE OF e {how}
    )
    SELECT locked.*, EXISTS (SELECT 1 FROM endpoints WHERE id = :e) AS present
      FROM (SELECT 1) AS one LEFT JOIN locked ON true
"""
_OPEN_WAIT = text(_OPEN.format(days=OPEN_DAYS, how=""))
_OPEN_SKIP = text(_OPEN.format(days=OPEN_DAYS, how="SKIP LOCKED"))


@dataclass(frozen=True)
class Opened:
    """The endpoint's row as the claim found it, locked until the transaction ends."""

    endpoint: Endpoint
    circuit: Circuit
    rate_tokens: float
    rate_elapsed: float | None  # seconds since its bucket was last used (None: never)
    days: tuple[int, int]  # the claims' day bounds (``inbox.store.db.days.open_days``)

    def bucket(self, wanted: int) -> throttle.Bucket | None:
        """What a claim of up to ``wanted`` may lease now (None: the endpoint has no limit)."""
        rate = self.endpoint.rate_per_second
        if rate is None or rate <= 0:
            return None
        return throttle.take(rate, self.rate_tokens, self.rate_elapsed, wanted)


def open_endpoint(conn: Connection, endpoint_id: EndpointId, wait: bool = True) -> Opened | None:
    """The endpoint's row, locked; None when ``wait`` is false and another transaction
    holds it. ``NotFound`` when there is no such endpoint."""
    row = conn.execute(_OPEN_WAIT if wait else _OPEN_SKIP, {"e": endpoint_id}).one()
    if row.id is None:
        if not row.present:
            raise NotFound(f"No endpoint {endpoint_id}.")
        return None  # held by another transaction (only without ``wait``)
    return _opened(row)


def _opened(r: Any) -> Opened:
    probe_in = float(r.probe_in) if r.probe_in is not None else None
    now = Circuit(
        CircuitState(r.circuit),
        r.circuit_failures,
        r.probe_backoff,
        probe_in,
        Window.from_json(r.circuit_window),
        float(r.clock),
    )
    elapsed = float(r.rate_elapsed) if r.rate_elapsed is not None else None
    return Opened(
        to_endpoint(r), now, float(r.rate_tokens), elapsed, (int(r.floor), int(r.tomorrow))
    )
