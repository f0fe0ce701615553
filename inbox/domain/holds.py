"""Legal holds: what a hold covers, and the two-person rule for releasing a tenant-wide one.

A hold keeps events out of retention's reach while it stands: their rows, raw bodies,
step results, attempts and deliveries stay, and so do the day partitions they live in.
A hold covers one of:

- ``tenant``: every event of a tenant;
- ``source``: every event of one of its sources;
- ``business_key``: every event of the tenant with that business key (its digest);
- ``event``: one event.

Releasing a hold ends it (the row stays, with who placed and who released it). A
tenant-wide hold takes two operators: one asks for the release, another confirms it;
the one who asked can never confirm their own request. Every step is in the audit log.

Pure: imports no framework or driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from inbox.domain.errors import Forbidden, InboxError


class HoldScope(StrEnum):
    TENANT = "tenant"
    SOURCE = "source"
    BUSINESS_KEY = "business_key"
    EVENT = "event"


# The database CHECK on ``legal_holds.scope`` lists the same values.
SCOPES = tuple(s.value for s in HoldScope)
MAX_REASON = 2000


class HoldNotActive(InboxError):
    """This legal hold has been released already."""

    http_status = 409
    code = "hold_released"


def needs_two_people(scope: HoldScope | str) -> bool:
    """A tenant-wide hold is released by two operators; any other by one."""
    return HoldScope(scope) is HoldScope.TENANT


def check_release(scope: HoldScope | str, requested_by: str | None, actor: str) -> bool:
    """Whether ``actor``'s release ends the hold now (True) or only asks for it (False).

    Raises Forbidden when the operator who asked for a tenant-wide release confirms it.
    """
    if not needs_two_people(scope):
        return True
    if requested_by is None:
        return False
    if requested_by == actor:
        raise Forbidden(
            f"A tenant-wide legal hold must be released by a different operator than the one"
            f" who asked for its release ({requested_by})."
        )
    return True


class EventHeld(InboxError):
    """A legal hold covers this event: its body is kept until the hold is released."""

    http_status = 409
    code = "event_held"


class EventUnfinished(InboxError):
    """This event is not finished: the worker still needs its body."""

    http_status = 409
    code = "event_unfinished"


@dataclass(frozen=True, slots=True)
class Hold:
    id: int
    public_id: str
    tenant: str
    scope: str
    subject: str  # what the scope names, for people: a source, an event, "business key"
    reason: str
    placed_by: str
    created_at: datetime
    release_requested_by: str | None
    released_by: str | None
    released_at: datetime | None

    @property
    def status(self) -> str:
        if self.released_at is not None:
            return "released"
        return "release requested" if self.release_requested_by else "active"

    def public(self) -> dict[str, Any]:
        return {
            "id": self.public_id,
            "tenant": self.tenant,
            "scope": self.scope,
            "subject": self.subject,
            "reason": self.reason,
            "status": self.status,
            "placed_by": self.placed_by,
            "placed_at": self.created_at.isoformat(),
            "release_requested_by": self.release_requested_by,
            "released_by": self.released_by,
            "released_at": self.released_at.isoformat() if self.released_at else None,
        }
