"""The transition tables: ``transition()`` allows exactly them, and the docs draw exactly them."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from inbox.domain.errors import InvalidTransition
from inbox.domain.states import (
    DELIVERY_ALLOWED,
    EVENT_ALLOWED,
    DeliveryState,
    EventState,
    transition,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "state_machine.md"


@pytest.mark.parametrize(
    ("states", "allowed"), [(EventState, EVENT_ALLOWED), (DeliveryState, DELIVERY_ALLOWED)]
)
def test_transition_allows_exactly_the_table(states: type, allowed: frozenset[object]) -> None:
    for current, target in itertools.product(states, states):
        if (current, target) in allowed:
            assert transition(current, target) is target
            assert transition(str(current), target) is target  # a row's state, as text
        else:
            with pytest.raises(InvalidTransition):
                transition(current, target)


def test_a_state_of_the_other_machine_is_refused() -> None:
    with pytest.raises(InvalidTransition):
        transition("pending", EventState.PROCESSING)
    with pytest.raises(InvalidTransition):
        transition(EventState.RECEIVED, DeliveryState.SENDING)


def _drawn(section: str) -> set[tuple[str, str]]:
    text = DOC.read_text().split(f"## {section}", 1)[1]
    diagram = text.split("```mermaid", 1)[1].split("```", 1)[0]
    edges = re.findall(r"^\s*(\w+) --> (\w+)", diagram, re.M)
    return {(a, b) for a, b in edges if "[*]" not in (a, b)}


def test_the_diagrams_draw_exactly_the_tables() -> None:
    assert _drawn("Events") == {(str(a), str(b)) for a, b in EVENT_ALLOWED}
    assert _drawn("Deliveries") == {(str(a), str(b)) for a, b in DELIVERY_ALLOWED}
