"""The circuit breaker's rule (inbox.domain.circuit), without a database."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from inbox.domain.circuit import (
    SLICES,
    Circuit,
    CircuitState,
    Outcome,
    Policy,
    Window,
    after,
    rate_trips,
    record,
    roll,
    step,
    stops,
)

P = Policy(failures=3, probe_min=1.0, probe_max=5.0, retry_after_max=300.0, failure_rate=0)
RATE = Policy(failures=3, failure_rate=0.5, window=60.0, min_attempts=20)
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


# --- the failure rate over a window ---------------------------------------------------------


def test_alternating_success_and_failure_opens_it_once_enough_attempts_are_in_the_window():
    c = Circuit(clock=1_000.0)
    seen = 0
    while c.state == CircuitState.CLOSED:
        c = step(c, FAIL if seen % 2 == 0 else OK, RATE)
        seen += 1
        assert seen <= 40
    # Never two failures in a row: the consecutive count alone would never open it. A
    # failure is judged with the rate: the 21st attempt is the first failure with at least
    # 20 attempts in the window (11 of 21 failed).
    assert seen == 21 and c.failures == 1
    assert c.window == Window()  # starts afresh when it closes again


def test_below_the_rate_or_below_the_minimum_it_stays_closed():
    c = Circuit(clock=0.0)
    for i in range(100):  # one failure in three: 33 %
        c = step(c, FAIL if i % 3 == 0 else OK, RATE)
    assert c.state == CircuitState.CLOSED
    few = Circuit(clock=0.0)
    for i in range(19):  # 19 attempts: under the minimum, however many fail in the mix
        few = step(few, FAIL if i % 2 == 0 else OK, RATE)
    assert few.state == CircuitState.CLOSED and few.window.attempts == 19
    assert not rate_trips(few.window, RATE)


def test_the_window_starts_at_a_failure_and_forgets_slices_older_than_it():
    w = record(Window(), 0.0, False, RATE)
    assert w == Window()  # successes alone: nothing kept, nothing written
    w = record(w, 5.0, True, RATE)
    w = record(w, 15.0, False, RATE)
    assert (w.attempts, w.failures, len(w.slices)) == (2, 1, 2)
    assert roll(w, 59.0, RATE).attempts == 2  # still inside the 60 s
    assert roll(w, 60.0, RATE) == Window()  # the failure's slice left the window: empty
    later = record(w, 65.0, True, RATE)
    # The failure's slice dropped; the success after it, with no failure left, forgotten.
    assert (later.attempts, later.failures, len(later.slices)) == (1, 1, 1)
    kept = record(record(w, 25.0, True, RATE), 65.0, False, RATE)
    assert (kept.attempts, kept.failures, len(kept.slices)) == (3, 1, SLICES)


def test_a_rate_of_zero_turns_the_window_off():
    off = Policy(failure_rate=0)
    c = Circuit(clock=0.0)
    for i in range(200):
        c = step(c, FAIL if i % 2 == 0 else OK, off)
    assert c.state == CircuitState.CLOSED and c.window == Window()


def test_the_window_round_trips_through_its_json():
    w = record(record(Window(), 1.0, True, RATE), 1.0, False, RATE)
    assert Window.from_json(w.to_json()) == w
    assert Window.from_json({}) == Window() and Window().to_json() == {}


@given(st.lists(st.tuples(st.booleans(), st.floats(0, 30)), max_size=80))
def test_it_opens_by_rate_only_with_enough_attempts_at_the_rate(steps) -> None:
    c, clock = Circuit(clock=0.0), 0.0
    for failed, gap in steps:
        clock += gap
        before = Circuit(c.state, c.failures, c.backoff, c.probe_in, c.window, clock)
        c = step(before, Outcome(failed), RATE)
        if before.state == CircuitState.CLOSED and c.state == CircuitState.OPEN:
            w = record(before.window, clock, True, RATE)
            assert before.failures + 1 >= RATE.failures or (
                w.attempts >= RATE.min_attempts and w.failures * 2 >= w.attempts
            )
        if c.state != CircuitState.CLOSED:
            break
