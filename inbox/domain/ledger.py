"""The ledger's day arithmetic: ids that carry their UTC day, and the partitions of a day.

The ledger tables (events and deliveries, and the rows that belong to them) are
partitioned by day of receipt. A row's id carries that day in its high bits::

    id = day << DAY_SHIFT | sequence        day = days since 1970-01-01 (UTC)

so the id alone names the partition: a lookup by id, by a child's ``event_id`` or by a
public id touches one partition, and the primary key (``id``) includes the partition key,
so foreign keys into a partitioned table work. 2**40 ids a day leaves 2**23 days (22,000
years) in a positive bigint.

Nothing here touches the database; ``inbox.store.partitions`` makes the partitions.
"""

from __future__ import annotations

import datetime as dt

DAY_SHIFT = 40
SEQUENCE_MASK = (1 << DAY_SHIFT) - 1
EPOCH = dt.date(1970, 1, 1)


def day_number(day: dt.date) -> int:
    """Days since 1970-01-01."""
    return (day - EPOCH).days


def day_of_number(number: int) -> dt.date:
    return EPOCH + dt.timedelta(days=number)


def day_of(row_id: int) -> dt.date:
    """The UTC day a ledger id was made on."""
    return day_of_number(row_id >> DAY_SHIFT)


def make_id(day: dt.date, sequence: int) -> int:
    """The id of the ``sequence``-th row of ``day`` (sequence below 2**40)."""
    if not 0 <= sequence <= SEQUENCE_MASK:
        raise ValueError(f"sequence {sequence} out of range")
    return day_number(day) << DAY_SHIFT | sequence


def bounds(day: dt.date) -> tuple[int, int]:
    """The ids of ``day``: ``lower <= id < upper`` (a range partition's FROM/TO)."""
    lower = day_number(day) << DAY_SHIFT
    return lower, lower + (1 << DAY_SHIFT)


def partition_name(table: str, day: dt.date) -> str:
    """``events`` on 2026-12-01 -> ``events_p20261201``."""
    return f"{table}_p{day:%Y%m%d}"


def day_of_partition(table: str, name: str) -> dt.date | None:
    """The day a partition named by ``partition_name`` holds, or None (the DEFAULT one,
    or a name of another kind)."""
    prefix = f"{table}_p"
    if not name.startswith(prefix) or len(name) != len(prefix) + 8:
        return None
    try:
        return dt.datetime.strptime(name[len(prefix) :], "%Y%m%d").date()
    except ValueError:
        return None
