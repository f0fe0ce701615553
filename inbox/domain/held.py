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


class EndpointHasDeliveries(InboxError):
    """This endpoint has deliveries that are not finished: say what becomes of them."""

    http_status = 409
    code = "endpoint_has_deliveries"

    def __init__(self, public_id: str, held: int, pending: int) -> None:
        super().__init__(
            f"Endpoint {public_id} has {held + pending} deliveries not yet sent ({held} held,"
            f" {pending} waiting): deleting it needs a choice for them. Discard them"
            ' (--held discard --reason R; the API\'s {"held": "discard", "reason": R}),'
            " each a dead letter, audited, two operators past INBOX_HELD_DISCARD_APPROVAL_MIN."
            " There is no release: a deleted endpoint is sent nothing. To send them, enable"
            " it and delete it once they are delivered.",
            held=held,
            pending=pending,
        )


class DeliveriesInFlight(InboxError):
    """Deliveries of this endpoint are being sent right now."""

    http_status = 409
    code = "deliveries_in_flight"

    def __init__(self, public_id: str, sending: int) -> None:
        super().__init__(
            f"Endpoint {public_id} has {sending} deliveries being sent right now: disable it"
            " (inbox endpoints disable), then delete it once they have finished (at most its"
            " timeout).",
            sending=sending,
        )


HELD_CHOICES = ("discard",)  # what a delete may do with what it holds; no release


def check_delete_choice(held: str | None, reason: str | None) -> str | None:
    """The choice a delete makes for its held deliveries: None (refused if any) or
    ``discard`` with its reason."""
    if held is None:
        if reason is not None:
            raise BadRequest("A reason goes with held=discard.")
        return None
    if held not in HELD_CHOICES:
        raise BadRequest(
            "held must be 'discard': a deleted endpoint is sent nothing, so its held"
            " deliveries cannot be released (enable it instead, and delete it later)."
        )
    return check_reason(reason)


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
    delete_endpoint: bool = False  # asked by a delete: approving it deletes the endpoint


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
