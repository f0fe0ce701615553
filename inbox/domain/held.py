"""Held deliveries: what an operator may do with a stopped endpoint's backlog.

A paused or disabled endpoint's deliveries are ``held`` (``inbox.domain.states``): never
attempted, never expired by retention. Enabling (or resuming) it releases them in their
original order; an operator may instead discard them, with a reason, each audited. More
than ``INBOX_HELD_DISCARD_APPROVAL_MIN`` of them wait for a second operator, who is never
the one who asked. Pure: imports no framework or driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from inbox.domain.errors import BadRequest, Forbidden, InboxError

DEFAULT_DISCARD_APPROVAL_MIN = 100


class DiscardStatus(StrEnum):
    AWAITING = "awaiting"  # more than the threshold: a second operator decides
    DISCARDED = "discarded"
    WITHDRAWN = "withdrawn"  # by its requester, or by enabling the endpoint


class NothingHeld(InboxError):
    """This endpoint has no held deliveries."""

    http_status = 409
    code = "nothing_held"


class DiscardAwaiting(InboxError):
    """A discard of this endpoint's held deliveries already waits for a second operator."""

    http_status = 409
    code = "discard_awaiting"


class NoDiscardAwaiting(InboxError):
    """No discard of this endpoint's held deliveries waits for approval."""

    http_status = 409
    code = "no_discard_awaiting"


class HeldDeliveries(InboxError):
    """This endpoint has held deliveries: enable it to send them, or discard them first."""

    http_status = 409
    code = "held_deliveries"


@dataclass(frozen=True, slots=True)
class Discard:
    """An operator's discard: ``held`` deliveries covered; ``discarded`` once done."""

    public_id: str
    endpoint: str
    reason: str
    requested_by: str
    held: int
    status: DiscardStatus
    discarded: int = 0
    decided_by: str | None = None


def check_reason(reason: str | None) -> str:
    text = (reason or "").strip()
    if not text:
        raise BadRequest("A discard needs a reason (it is kept in the audit log).")
    if len(text) > 500:
        raise BadRequest("A discard's reason is at most 500 characters.")
    return text


def needs_second_operator(held: int, approval_min: int) -> bool:
    return held > approval_min


def check_approver(requested_by: str, approver: str) -> None:
    if requested_by == approver:
        raise Forbidden(
            "A discard of held deliveries must be approved by a different operator than "
            "the one who asked for it."
        )
