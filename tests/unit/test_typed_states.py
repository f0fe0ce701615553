"""A read row's state is its enum, not the column's text: a typo in a compare fails the
type check, and a state the enum does not know fails where the row is read."""

from __future__ import annotations

import dataclasses

import pytest

from inbox.domain.states import DeliveryState, EventState
from inbox.store.reads import stats
from inbox.store.reads.deliveries import DeliverySummary
from inbox.store.reads.events import EventSummary


def _row(cls: type, **given: object) -> object:
    values = {f.name: None for f in dataclasses.fields(cls)}
    return cls(**{**values, **given})


def test_rows_carry_their_states_as_enums() -> None:
    event = _row(EventSummary, state="quarantined")
    assert event.state is EventState.QUARANTINED  # type: ignore[attr-defined]
    assert _row(DeliverySummary, state="failed").state is DeliveryState.FAILED  # type: ignore[attr-defined]
    held = stats.BacklogRow("t", "held", 1, 0.0)  # type: ignore[arg-type]  # the column text
    assert held.state is DeliveryState.HELD


def test_a_state_the_enum_does_not_know_fails_where_it_is_read() -> None:
    with pytest.raises(ValueError, match="'stuck'"):
        stats.DepthRow("t", "s", "stuck", 1, 0.0)  # type: ignore[arg-type]
