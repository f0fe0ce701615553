"""The one way the store asks whether an ordered lane has an unfinished event before a row.

A lane is ``(tenant_id, ordering_key)``; its unfinished events are indexed by
``ix_events_ordering`` (tenant, lane, position, id; partial: received or processing). The
question is asked as "the lane's first unfinished event before this one", an index scan in the
lane's order that stops at the first live entry. Written as ``p.id < ev.id`` the planner
may instead walk the primary key from the day's first id and filter by lane (it did, with
statistics taken during a flood: every earlier event of the day read, for each candidate,
0.3 s per claim); the row comparison can only be served by the lane's index, and a plain
index scan marks the entries of finished events dead as it passes them, where a bitmap
scan would read them again each time.
"""

from __future__ import annotations

# A lane's order: its position (``events.lane_position``: 0 in receipt order, else the
# provider's time or version), then the event id (receipt). The index's columns, in order.
ORDERED = "{t}.tenant_id, {t}.ordering_key, {t}.lane_position, {t}.id"
ORDER = "({a}) {op} ({b})"

# ``{p}``: the alias for the earlier event; ``{ev}``: the row asked about; ``{lo}``/``{hi}``:
# the day bounds (``inbox.store.db.days``); ``{lock}``: a locking clause, or nothing.
_EARLIER = (
    "SELECT {p}.id FROM events {p}"
    " WHERE {p}.tenant_id = {ev}.tenant_id AND {p}.ordering_key = {ev}.ordering_key"
    " AND {p}.id >= {lo} AND {p}.id < {hi}"
    " AND "
    + ORDER.format(a=ORDERED.format(t="{p}"), op="<", b=ORDERED.format(t="{ev}"))
    + " AND {p}.state IN ('received', 'processing')"
    " ORDER BY " + ORDERED.format(t="{p}") + " LIMIT 1{lock}"
)


def earlier(p: str, ev: str, lo: str = "{lo}", hi: str = "{hi}", lock: str = "") -> str:
    """A subquery: the first unfinished event of ``ev``'s lane before it (or no row)."""
    return _EARLIER.format(p=p, ev=ev, lo=lo, hi=hi, lock=f" {lock}" if lock else "")
