"""How an ingest, a run and a delivery attempt ended: the words the store records, the
metrics count and the logs say. ``StrEnum``s, so each member is its own text in a
column, a label, a log line or JSON, and a misspelt outcome fails the type check.
"""

from __future__ import annotations

from enum import StrEnum


class IngestOutcome(StrEnum):
    """What the receiver's claim of an event's key decided."""

    ACCEPTED = "accepted"  # a new event, stored
    DUPLICATE = "duplicate"  # a copy of an event stored before: answered as it was
    CONFLICT = "conflict"  # the key was used with another body (422)
    IN_FLIGHT = "in_flight"  # the key's first request has no answer yet (409)


class RunOutcome(StrEnum):
    """How a completed event's playbook run ended (the event's ``outcome`` column)."""

    COMPLETED = "completed"  # every step ran or was already done
    DUPLICATE_FACT = "duplicate_fact"  # a once-per-business-key step ran for another event
    STALE = "stale"  # a newer event of the same business key was seen first


class RunInterrupted(StrEnum):
    """How a worker's run of a claimed event ended when it recorded no state of its own
    (``inbox.services.runner.run_claimed`` returns the event's state otherwise)."""

    LOST = "lost"  # the lease was lost: another worker owns the event now
    DEFERRED = "deferred"  # put back: another event of its business key was running
    HELD = "held"  # its playbook is not registered here: held, no attempt spent


class DeliveryOutcome(StrEnum):
    """What one delivery attempt counts as (the courier's result, the attempts metric)."""

    DELIVERED = "delivered"
    RETRIED = "retried"  # pending again, due after its backoff
    FAILED = "failed"  # dead-lettered
    BLOCKED = "blocked"  # the SSRF guard refused the destination
    LOST = "lost"  # the lease was lost before the attempt was recorded
