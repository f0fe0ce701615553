"""The circuit breaker's rule (inbox.domain.circuit), without a database."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from inbox.domain.circuit import Circuit, CircuitState, Outcome, Policy, after, step, stops

P = Policy(failures=3, probe_min=1.0, probe_max=5.0, retry_after_max=300.0)
FAIL, OK = Outcome(True), Outcome(False)


def test_consecutive_failures_open_it_and_a_success_in_between_resets_the_count() -> None:
    c = after(Circuit(), [FAIL, FAIL, OK, FAIL, FAIL], P).circuit
    assert (c.state, c.failures) == (CircuitState.CLOSED, 2)
    change = after(c, [FAIL], P, random.Random(1))
    assert change.opened and change.circuit.state == CircuitState.OPEN
    assert 0.8 <= (change.circuit.probe_in or 0) <= 1.2  # probe_min, with jitter
    assert stops(c, FAIL, P) and not stops(Circuit(), FAIL, P)


def test_failed_probes_double_the_wait_up_to_the_cap_and_a_success_closes() -> None:
    c = Circuit(CircuitState.HALF_OPEN, 3, 1.0, None)
    waits = []
    for _ in range(6):
        c = after(c, [FAIL], P, random.Random(2)).circuit
        waits.append(c.backoff)
        c = Circuit(CircuitState.HALF_OPEN, c.failures, c.backoff, None)  # the next probe
    assert waits == [2.0, 4.0, 5.0, 5.0, 5.0, 5.0]
    change = after(c, [OK], P)
    assert change.closed and change.circuit == Circuit()


def test_retry_after_opens_at_once_and_is_honoured_but_bounded() -> None:
    change = after(Circuit(), [Outcome(True, 30.0)], P)
    assert change.opened and change.circuit.probe_in == 30.0  # never sooner than asked
    huge = after(Circuit(), [Outcome(True, 86_400.0)], P).circuit
    assert huge.probe_in == 300.0


def test_an_open_circuit_untouched_keeps_its_probe_time() -> None:
    c = Circuit(CircuitState.OPEN, 5, 2.0, 1.5)
    assert after(c, [], P).circuit == c


@given(st.lists(st.booleans(), max_size=40))
def test_open_only_after_enough_failures_and_closed_after_any_success(fails: list[bool]) -> None:
    c = Circuit()
    run = 0
    for failed in fails:
        c = step(c, Outcome(failed), P)
        run = run + 1 if failed else 0
        if not failed:
            assert c == Circuit()
        if c.state == CircuitState.CLOSED:
            assert run < P.failures
