"""The ledger's day arithmetic: ids that carry their UTC day, and the partitions of a day.

The ledger tables (events and deliveries, and the rows that belong to them) are
partitioned by day of receipt. A row's id carries that day in its high bits::

    id = day << DAY_SHIFT | sequence        day = days since 1970-01-01 (UTC)

so the id alone names the partition: a lookup by id, by a child's ``event_id`` or by a
public id touches one partition, and the primary key (``id``) includes the partition key,
so foreign keys into a partitioned table work. 2**40 ids a day leaves 2**23 days (22,000
years) in a positive bigint.

Nothing here touches the database; ``inbox.store.schema.partitions`` makes the partitions.
"""

from __future__ import annotations

import datetime as dt
import functools

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


def day_span(lo_id: int, hi_id: int) -> tuple[int, int]:
    """Whole days around two ids: the first id of ``lo_id``'s day and the first id past
    ``hi_id``'s day (``lower <= id < upper`` holds for every id of those days)."""
    return lo_id >> DAY_SHIFT << DAY_SHIFT, ((hi_id >> DAY_SHIFT) + 1) << DAY_SHIFT


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


# Public ids of events carry their UTC day too: ``evt_20261201`` + 16 hex digits (64
# random bits), so a lookup by public id names its partitions. The day is the web
# host's, the id's is the database's: around midnight they may differ by one, so a
# lookup covers the day before and after as well. Ids made before the ledger was
# partitioned (``evt_`` + 24 hex digits) carry no day: they are looked up everywhere.
PUBLIC_DAY_FORMAT = "%Y%m%d"


@functools.lru_cache(maxsize=8)
def _day_text(day: dt.date) -> str:
    # The receiver makes a public id per request and the day rarely changes: formatting
    # it each time (strftime) took ten times as long as the rest of the id.
    return day.strftime(PUBLIC_DAY_FORMAT)


def public_id(prefix: str, day: dt.date, random_hex: str) -> str:
    """``evt_`` + the day + ``random_hex``."""
    return f"{prefix}{_day_text(day)}{random_hex}"


def day_of_public_id(prefix: str, value: str) -> dt.date | None:
    """The day a public id made by ``public_id`` carries, or None (an older id)."""
    digits = value[len(prefix) : len(prefix) + 8]
    if not value.startswith(prefix) or len(digits) != 8 or not digits.isdigit():
        return None
    try:
        return dt.datetime.strptime(digits, PUBLIC_DAY_FORMAT).date()
    except ValueError:
        return None


# Every id: the window of a public id that carries no day.
ALL_IDS = (0, (1 << 63) - 1)


def lookup_bounds(prefix: str, value: str) -> tuple[int, int]:
    """The ids a row with public id ``value`` may have: its day and the days either side,
    or every id for an id without a day."""
    day = day_of_public_id(prefix, value)
    if day is None or day <= EPOCH:
        return ALL_IDS
    one = dt.timedelta(days=1)
    return bounds(day - one)[0], bounds(day + one)[1]
