"""A tenant's fair share of the workers: its in-flight cap and its weight (migration 0031).

Each claim gives every tenant up to its weight's share of the batch (weight 3: three times
a weight-1 tenant's share) before it fills the rest oldest first from the tenants without a
cap; a capped tenant never has more than its cap of events running at once
(``inbox.store.write.queue``). Pure: imports no framework or driver.
"""

from __future__ import annotations

from inbox.domain.errors import BadRequest

MAX_WEIGHT = 100
MAX_IN_FLIGHT = 1_000_000


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_cap(value: object) -> int:
    """An in-flight cap (BadRequest unless a whole number from 1 to ``MAX_IN_FLIGHT``)."""
    if not _whole(value) or not 1 <= value <= MAX_IN_FLIGHT:  # type: ignore[operator]
        raise BadRequest(
            f"max_in_flight is a whole number from 1 to {MAX_IN_FLIGHT}, or null (no cap)."
        )
    assert isinstance(value, int)
    return value


def check_weight(value: object) -> int:
    """A weight (BadRequest unless a whole number from 1 to ``MAX_WEIGHT``)."""
    if not _whole(value) or not 1 <= value <= MAX_WEIGHT:  # type: ignore[operator]
        raise BadRequest(f"weight is a whole number from 1 to {MAX_WEIGHT}.")
    assert isinstance(value, int)
    return value
