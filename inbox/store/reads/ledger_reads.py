"""Reading the ledger: an event with its key's counters, and lookups that name one day.

While an event's key lives, its copies are counted on ``event_keys`` (a duplicate is one
small update there); when the key is pruned the counts are added to the event row
(``inbox.store.write.retention``). A reader adds the two: ``KEYS_JOIN`` joins an event ``e`` to
its live key ``k`` on the key's primary key, ``COUNTERS`` gives the sums under the
event's own column names.

A lookup by public id carries the id range of that id's day (``inbox.domain.ledger.
lookup_bounds``), so PostgreSQL reads the partitions of that day and its neighbours only;
an id made before the ledger was partitioned carries no day and is looked up in every
partition (one probe of each day's public_id index: such ids age out with their days,
so no lookup table is kept for them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain import ledger
from inbox.domain.records import EventId, TenantId
from inbox.store.schema.ledger_tables import events

KEYS_JOIN = (
    " LEFT JOIN event_keys k ON k.tenant_id = e.tenant_id AND k.source_id = e.source_id"
    " AND k.key_digest = e.key_digest AND k.event_id = e.id "
)

COUNTERS = (
    " e.duplicate_count + coalesce(k.duplicate_count, 0) AS duplicate_count,"
    " coalesce(e.first_duplicate_at, k.first_duplicate_at) AS first_duplicate_at,"
    " greatest(e.last_duplicate_at, k.last_duplicate_at) AS last_duplicate_at "
)

# The count alone, where a join does not fit (a list over ``events e``).
DUPLICATE_COUNT = (
    " e.duplicate_count + coalesce((SELECT k.duplicate_count FROM event_keys k"
    " WHERE k.tenant_id = e.tenant_id AND k.source_id = e.source_id"
    " AND k.key_digest = e.key_digest AND k.event_id = e.id), 0) AS duplicate_count "
)

_COUNTED = ("duplicate_count", "first_duplicate_at", "last_duplicate_at")

# Every column of an event as it reads (``e.*`` with the key's counters added, and the
# key's expiry while it lives): for ``SELECT {EVENT_ROW} FROM events e {KEYS_JOIN}``.
EVENT_ROW = (
    ", ".join(f"e.{c.name}" for c in events.c if c.name not in _COUNTED)
    + ","
    + COUNTERS
    + ", k.expires_at AS key_expires_at "
)

EVENT_PREFIX = "evt_"


def event_bounds(public_id: str) -> tuple[int, int]:
    """The ids an event with ``public_id`` may have (every id for an older public id)."""
    return ledger.lookup_bounds(EVENT_PREFIX, public_id)


def by_public_id(alias: str, param: str = "p") -> str:
    """The condition for ``alias``'s row with public id ``:param``, pruned to its days:
    bind ``bounds_params(value, param)`` with it."""
    return (
        f"{alias}.public_id = :{param} AND {alias}.id >= :{param}_lo AND {alias}.id < :{param}_hi"
    )


def bounds_params(public_id: str, param: str = "p") -> dict[str, Any]:
    lo, hi = event_bounds(public_id)
    return {param: public_id, f"{param}_lo": lo, f"{param}_hi": hi}


def span(public_ids: Iterable[str]) -> tuple[int, int]:
    """One id range covering every id in ``public_ids`` (for ``= ANY(...)`` lookups)."""
    ranges = [event_bounds(p) for p in public_ids]
    if not ranges:
        return ledger.ALL_IDS
    return min(r[0] for r in ranges), max(r[1] for r in ranges)


def since_event(event_id: EventId) -> int:
    """The lowest id a delivery of ``event_id`` can have: a delivery is made on or after
    its event's day, so a lookup bounded by it skips every older day's partition when
    the query is planned."""
    return ledger.bounds(ledger.day_of(event_id))[0]


def tenant_id(conn: Connection, name: str | None) -> TenantId | None:
    """The id of the tenant named ``name`` (None for no name; -1, which matches nothing,
    for an unknown one). A ledger read filters ``tenant_id = :id`` on the ledger's own
    column, which its indexes serve; ``tenants.name`` through a join is served by none
    and reads every day's partition."""
    if name is None:
        return None
    found = conn.execute(text("SELECT id FROM tenants WHERE name = :n"), {"n": name}).scalar()
    return TenantId(int(found) if found is not None else -1)
