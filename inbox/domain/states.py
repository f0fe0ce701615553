"""Event states and the one table of allowed transitions.

The same rule is enforced by the database (a trigger in the first migration);
``docs/state_machine.md`` draws it.
"""

from __future__ import annotations

from enum import StrEnum

from inbox.domain.errors import InvalidTransition


class EventState(StrEnum):
    RECEIVED = "received"
    PROCESSING = "processing"
    COMPLETED = "completed"
    QUARANTINED = "quarantined"


S = EventState

ALLOWED: frozenset[tuple[EventState, EventState]] = frozenset(
    {
        (S.RECEIVED, S.PROCESSING),  # a worker takes a lease
        (S.PROCESSING, S.COMPLETED),  # the playbook finished
        (S.PROCESSING, S.RECEIVED),  # a retryable failure, or the lease expired
        (S.PROCESSING, S.QUARANTINED),  # a permanent failure or attempts exhausted
        (S.RECEIVED, S.QUARANTINED),  # schema failure before any step, or attempts spent by crashes
        (S.QUARANTINED, S.RECEIVED),  # an operator's replay
    }
)

FINISHED: frozenset[EventState] = frozenset({S.COMPLETED, S.QUARANTINED})


def transition(current: EventState | str, target: EventState | str) -> EventState:
    """Return ``target`` if moving there from ``current`` is allowed, else raise."""
    cur, tgt = EventState(current), EventState(target)
    if (cur, tgt) not in ALLOWED:
        raise InvalidTransition(f"{cur} -> {tgt} is not allowed")
    return tgt
