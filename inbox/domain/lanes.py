"""Ordered lanes: who may skip a quarantined event that blocks its lane, and when.

A source with ``serialize_by_business_key`` gives each event a lane (its business key);
the lane's events run one at a time in receipt order. A quarantined event blocks its lane:
the events behind it wait (held, not failed) until an operator either replays it (it runs
first, then the rest) or skips it (the lane moves on without it; it stays quarantined).
A skip needs a reason, is audited, and takes two operators when more than
``INBOX_LANE_SKIP_APPROVAL_ABOVE`` events wait behind it: one asks, another confirms, and
the one who asked can never confirm their own request.

Pure: imports no framework or driver.
"""

from __future__ import annotations

from inbox.domain.errors import BadRequest, Forbidden, InboxError

MAX_REASON = 2000
# A parked event (migration 0031): received, behind an unfinished event or the blocker of
# its lane, never due until the transaction that finishes its predecessor (or skips the
# blocker) makes it due. The claim reads due events only, so it reads each lane's head.
PARKED_UNTIL = "9998-01-01 00:00:00+00"


class LaneNotBlocked(InboxError):
    """This event does not block a lane: it is not a quarantined event of an ordered
    source, or its lane was skipped already."""

    http_status = 409
    code = "lane_not_blocked"


def check_reason(reason: str | None) -> str:
    """The skip's reason, stripped; BadRequest when it is missing or too long."""
    text = (reason or "").strip()
    if not text:
        raise BadRequest("A skip needs a reason (why the lane may move on without this event).")
    if len(text) > MAX_REASON:
        raise BadRequest(f"The reason is longer than {MAX_REASON} characters.")
    return text


def needs_two_people(held: int, approval_above: int) -> bool:
    """More events wait behind the blocker than one operator may let past it alone."""
    return held > approval_above


def check_skip(held: int, approval_above: int, requested_by: str | None, actor: str) -> bool:
    """Whether ``actor``'s skip moves the lane on now (True) or only asks for it (False).

    Raises Forbidden when the operator who asked confirms their own request.
    """
    if not needs_two_people(held, approval_above) and requested_by is None:
        return True
    if requested_by is None:
        return False
    if requested_by == actor:
        raise Forbidden(
            f"{held} events wait behind this event: its skip must be confirmed by a different"
            f" operator than the one who asked for it ({requested_by})."
        )
    return True
