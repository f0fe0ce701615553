"""An endpoint's circuit breaker, the pure part: what a round of attempts does to it.

``closed``: deliveries go out freely. After ``failures`` consecutive retryable failures (a
5xx, 408, 429, a timeout, a refused connection), or a failure rate of at least
``failure_rate`` over the last ``window`` seconds once ``min_attempts`` attempts fell in it
(``Window``: an endpoint failing every other time is never N in a row), or an answer
that asks us to wait (``Retry-After`` on a 429 or 503), the circuit **opens**: nothing is
attempted one by one;
each delivery waits. When its probe is due, one courier takes one delivery (the oldest) as
a probe and the circuit is **half open** until that probe answers: a success closes it
(and the whole backlog is due at once), a failure opens it again with a longer wait
(doubling from ``probe_min`` to ``probe_max``, with jitter; at least what ``Retry-After``
asked, at most ``retry_after_max``). A probe does not spend its delivery's attempt budget.
An answer that is not retryable (2xx, other 4xx) shows the endpoint is up: it counts as a
success here, whatever becomes of the delivery.

The state lives on the endpoint's row (``endpoints.circuit``), so every courier process
sees one circuit; the store applies ``after`` under the row's lock. Pure: no framework or
driver.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"  # one probe in flight


CIRCUIT_STATES: tuple[str, ...] = tuple(s.value for s in CircuitState)


SLICES = 6  # a window is kept as this many slices, each window / SLICES seconds long


@dataclass(frozen=True, slots=True)
class Policy:
    failures: int = 3  # consecutive retryable failures that open the circuit
    probe_min: float = 1.0  # seconds before the first probe
    probe_max: float = 5.0  # the longest wait between probes (before jitter)
    retry_after_max: float = 300.0  # an endpoint's Retry-After is honoured up to this
    failure_rate: float = 0.5  # this share of failures in the window opens it (0: never)
    window: float = 60.0  # seconds: the failure rate's window
    min_attempts: int = 20  # attempts in the window before its rate counts


@dataclass(frozen=True, slots=True)
class Window:
    """The failure rate's window, as the endpoint's row keeps it: attempts and retryable
    failures per slice (``Policy.window / SLICES`` seconds), the newest last; ``start``: the
    newest slice's number (the clock divided by the slice's length).

    It starts at a failure: while none is in it the window is empty, and a success alone
    leaves it so (a healthy endpoint's rounds write nothing). The rate therefore counts
    from the window's first failure, never from before it. A slice older than the window
    is dropped, and with the last failure gone the window is empty again."""

    start: int = 0
    slices: tuple[tuple[int, int], ...] = ()

    @property
    def attempts(self) -> int:
        return sum(a for a, _ in self.slices)

    @property
    def failures(self) -> int:
        return sum(f for _, f in self.slices)

    def to_json(self) -> dict[str, object]:
        if not self.slices:
            return {}
        return {"start": self.start, "slices": [list(s) for s in self.slices]}

    @classmethod
    def from_json(cls, raw: object) -> Window:
        if not isinstance(raw, dict) or not raw.get("slices"):
            return cls()
        return cls(int(raw["start"]), tuple((int(a), int(f)) for a, f in raw["slices"]))


def _slice(clock: float, policy: Policy) -> int:
    return int(clock // (policy.window / SLICES))


def roll(w: Window, clock: float, policy: Policy) -> Window:
    """The window at ``clock``: slices older than the window dropped; empty when no failure
    is left in it."""
    if not w.slices:
        return w
    now = _slice(clock, policy)
    shift = min(max(0, now - w.start), SLICES)
    slices = (w.slices + ((0, 0),) * shift)[-SLICES:]
    if not any(f for _, f in slices):
        return Window()
    return Window(max(now, w.start), slices)


def record(w: Window, clock: float, failed: bool, policy: Policy) -> Window:
    """The window after one attempt at ``clock``."""
    w = roll(w, clock, policy)
    if not w.slices:
        if not failed:
            return w
        w = Window(_slice(clock, policy), ((0, 0),))
    a, f = w.slices[-1]
    return Window(w.start, (*w.slices[:-1], (a + 1, f + int(failed))))


def rate_trips(w: Window, policy: Policy) -> bool:
    """At least ``failure_rate`` of at least ``min_attempts`` attempts in the window failed
    (as resilience4j's failureRateThreshold: equal or greater opens it)."""
    return (
        policy.failure_rate > 0
        and w.attempts >= max(1, policy.min_attempts)
        and w.failures >= policy.failure_rate * w.attempts
    )


@dataclass(frozen=True, slots=True)
class Circuit:
    """The endpoint's circuit as its row holds it; ``probe_in``: seconds until a probe may
    go (None while closed), from the database's clock; ``window``: the failure rate's
    window while closed; ``clock``: the database's time when it was read (epoch seconds;
    not part of its value)."""

    state: CircuitState = CircuitState.CLOSED
    failures: int = 0
    backoff: float = 0.0
    probe_in: float | None = None
    window: Window = Window()
    clock: float = field(default=0.0, compare=False)

    @property
    def quiet(self) -> bool:
        """Closed with no failure counted: a round of successes changes nothing of it."""
        return self.state == CircuitState.CLOSED and not self.failures and not self.window.slices


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt says about the endpoint."""

    failed: bool  # retryable: the endpoint did not take it
    retry_after: float | None = None  # seconds it asked us to wait (429/503)


@dataclass(frozen=True, slots=True)
class Change:
    """The circuit after a round: write it back; ``opened``/``closed`` are transitions
    (counted, and a close makes the backlog due now)."""

    circuit: Circuit
    opened: bool = False
    closed: bool = False


def _jitter(seconds: float, rand: random.Random | None) -> float:
    return seconds * (0.8 + 0.4 * (rand or random).random())


def step(c: Circuit, o: Outcome, policy: Policy) -> Circuit:
    """The circuit after one attempt (its wait before jitter in ``backoff``)."""
    closed = c.state == CircuitState.CLOSED
    window = c.window
    if closed and policy.failure_rate > 0:
        window = record(window, c.clock, o.failed, policy)
    if not o.failed:  # a success closes it; while closed, the window keeps counting
        return Circuit(window=window if closed else Window(), clock=c.clock)
    failures = c.failures + 1
    asked = min(o.retry_after, policy.retry_after_max) if o.retry_after is not None else None
    if closed:
        if failures < policy.failures and asked is None and not rate_trips(window, policy):
            return replace(c, failures=failures, window=window)
        backoff = policy.probe_min
    else:  # a failed probe (or a late answer of a round sent before it opened)
        backoff = min(policy.probe_max, max(policy.probe_min, c.backoff * 2))
    # ``probe_in`` here: what the endpoint asked for, if anything; ``after`` adds the wait.
    # Open: the window starts afresh when it closes again.
    return Circuit(CircuitState.OPEN, failures, backoff, asked, clock=c.clock)


def after(
    c: Circuit, outcomes: Iterable[Outcome], policy: Policy, rand: random.Random | None = None
) -> Change:
    """The circuit after a round of attempts, in the order they were made."""
    now = c
    for o in outcomes:
        now = step(now, o, policy)
    if now is not c and now.state == CircuitState.OPEN:  # opened, or a probe failed
        now = replace(now, probe_in=max(_jitter(now.backoff, rand), now.probe_in or 0.0))
    opened = c.state == CircuitState.CLOSED and now.state == CircuitState.OPEN
    closed = c.state != CircuitState.CLOSED and now.state == CircuitState.CLOSED
    return Change(now, opened=opened, closed=closed)


def stops(c: Circuit, o: Outcome, policy: Policy) -> bool:
    """Whether this attempt opens (or keeps open) the circuit: the round stops here and
    hands the rest of its batch back unattempted."""
    return step(c, o, policy).state == CircuitState.OPEN
