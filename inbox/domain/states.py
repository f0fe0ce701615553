"""Event and delivery states, and the one table of allowed transitions for each.

The database enforces the same tables (triggers: ``events_state_guard`` in migration 0001,
``deliveries_state_guard`` in 0008); ``tests/integration/test_state_guards.py`` drives both
machines against them. ``docs/state_machine.md`` draws them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from inbox.domain.errors import InvalidTransition


class EventState(StrEnum):
    RECEIVED = "received"
    PROCESSING = "processing"
    COMPLETED = "completed"
    QUARANTINED = "quarantined"
    FILTERED = "filtered"  # stored at ingest, its source's filter not true: never run


class DeliveryState(StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    DELIVERED = "delivered"
    FAILED = "failed"
    HELD = "held"  # its endpoint is paused or disabled: kept, never attempted, until released


S = EventState
D = DeliveryState

EVENT_ALLOWED: frozenset[tuple[EventState, EventState]] = frozenset(
    {
        (S.RECEIVED, S.PROCESSING),  # a worker takes a lease
        (S.PROCESSING, S.COMPLETED),  # the playbook finished
        (S.PROCESSING, S.RECEIVED),  # a retryable failure, or the lease expired
        (S.PROCESSING, S.QUARANTINED),  # a permanent failure or attempts exhausted
        (S.RECEIVED, S.QUARANTINED),  # schema failure before any step, or attempts spent by crashes
        (S.QUARANTINED, S.RECEIVED),  # an operator's replay
        (S.FILTERED, S.RECEIVED),  # an operator's replay runs it despite the filter
    }
)
ALLOWED = EVENT_ALLOWED

DELIVERY_ALLOWED: frozenset[tuple[DeliveryState, DeliveryState]] = frozenset(
    {
        (D.PENDING, D.SENDING),  # a courier claims an in-flight slot
        (D.SENDING, D.DELIVERED),  # the endpoint answered 2xx
        (D.SENDING, D.PENDING),  # a retry, handed back unattempted, or the lease expired
        (D.SENDING, D.FAILED),  # a permanent answer, or attempts exhausted
        (D.FAILED, D.PENDING),  # an operator's replay
        (D.PENDING, D.HELD),  # its endpoint was paused or disabled
        (D.SENDING, D.HELD),  # a retry, handed back or swept while its endpoint is stopped
        (D.HELD, D.PENDING),  # its endpoint was enabled (or resumed): released in order
        (D.HELD, D.FAILED),  # discarded by an operator, with a reason (audited)
    }
)

FINISHED: frozenset[EventState] = frozenset({S.COMPLETED, S.QUARANTINED, S.FILTERED})
REPLAYABLE: frozenset[EventState] = frozenset({S.QUARANTINED, S.FILTERED})
PENDING: frozenset[EventState] = frozenset({S.RECEIVED, S.PROCESSING})  # not finished yet
DELIVERY_FINISHED: frozenset[DeliveryState] = frozenset({D.DELIVERED, D.FAILED})
# Not finished: a day holding one of these is never dropped by retention.
DELIVERY_UNFINISHED: frozenset[DeliveryState] = frozenset({D.PENDING, D.SENDING, D.HELD})

# Every state's name, in the enums' order: what a list filter accepts and the schema's CHECK.
STATES: tuple[str, ...] = tuple(s.value for s in EventState)
DELIVERY_STATES: tuple[str, ...] = tuple(s.value for s in DeliveryState)

State = TypeVar("State", EventState, DeliveryState)

_TABLES: dict[type[StrEnum], frozenset[tuple[StrEnum, StrEnum]]] = {
    EventState: EVENT_ALLOWED,
    DeliveryState: DELIVERY_ALLOWED,
}


def transition(current: State | str, target: State) -> State:
    """Return ``target`` if moving there from ``current`` is allowed by its table, else raise.

    The table is ``target``'s: an EventState for events, a DeliveryState for deliveries.
    """
    kind = type(target)
    try:
        cur = kind(current)
    except ValueError:
        raise InvalidTransition(f"{current!r} is not a {kind.__name__}") from None
    if (cur, target) not in _TABLES[kind]:
        raise InvalidTransition(f"{cur} -> {target} is not allowed")
    return target
