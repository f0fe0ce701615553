"""Statements whose text names the days they touch, so that every plan of them does.

PostgreSQL prunes a partitioned table's days before planning only by values it sees when
it plans. A bound passed as a parameter is such a value for a custom plan, but a prepared
statement (psycopg prepares one after a few executions) soon runs its generic plan, which
keeps every partition, prunes at run time, and first locks all of them (PostgreSQL 15 locks
every relation a generic plan names, on each execution). Over a year of daily partitions
that costs more than the statement's work; on a ledger of a few days it does not show.

So the day bounds are written into the text as constants, ``{lo}`` and ``{hi}``: the first
id of the lowest day and the first id past the highest (``inbox.domain.ledger.day_span``).
Rounded to whole days, one text serves every batch of the same days (all day, usually),
and each is prepared once per connection and planned over its days alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, TextClause, text

from inbox.domain import ledger

# The claims' day bounds, as columns of a SELECT: the floor (``ledger_floor``: at most the
# lowest id of an unfinished event or delivery) and the first id of tomorrow by the
# database's clock (ids are made by it, so nothing has a later day; tomorrow's covers a
# claim that runs across midnight).
OPEN_DAYS = """
    coalesce((SELECT max(floor) FROM ledger_floor), 0) AS floor,
    (floor(extract(epoch FROM now()) / 86400)::bigint + 1) << 40 AS tomorrow
"""

_OPEN_DAYS = text(f"SELECT {OPEN_DAYS}")


def open_days(conn: Connection) -> tuple[int, int]:
    """The floor and the first id of tomorrow (``OPEN_DAYS``)."""
    row = conn.execute(_OPEN_DAYS).one()
    return int(row.floor), int(row.tomorrow)


# A replay's CTE that lowers the floor to the lowest id it moved (rows named ``moved``
# with an ``id``), in the replay's own statement: the claims never look past it. Nothing
# moved: the floor's row is neither written nor locked.
LOWER_FLOOR = """
    UPDATE ledger_floor SET floor = least(floor, (SELECT min(id) FROM moved))
     WHERE EXISTS (SELECT 1 FROM moved)
"""

# Texts kept per statement: a batch spans one or two days; replays of old events add a
# few pairs. Past this, the cache starts again (each text is cheap to make).
_KEPT = 32


class DayBounded:
    """A statement with ``{lo}`` and ``{hi}`` in its text, made for the days of two ids."""

    def __init__(self, sql: str) -> None:
        if "{lo}" not in sql or "{hi}" not in sql:
            raise ValueError("a day-bounded statement names {lo} and {hi}")
        self.sql = sql
        self._made: dict[tuple[int, int], TextClause] = {}

    def over(self, lo_id: int, hi_id: int) -> TextClause:
        """The statement for the days from ``lo_id``'s to ``hi_id``'s."""
        key = ledger.day_span(lo_id, hi_id)
        made = self._made.get(key)
        if made is None:
            if len(self._made) >= _KEPT:
                self._made.clear()
            lo, hi = key
            made = text(self.sql.replace("{lo}", str(lo)).replace("{hi}", str(hi)))
            self._made[key] = made
        return made

    def spanning(self, ids: Sequence[int]) -> TextClause:
        """The statement for the days of every id in ``ids`` (not empty)."""
        return self.over(min(ids), max(ids))
