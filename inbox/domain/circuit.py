"""An endpoint's circuit breaker, the pure part: what a round of attempts does to it.

``closed``: deliveries go out freely. After ``failures`` consecutive retryable failures (a
5xx, 408, 429, a timeout, a refused connection), or an answer that asks us to wait
(``Retry-After`` on a 429 or 503), the circuit **opens**: nothing is attempted one by one;
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
from dataclasses import dataclass, replace
from enum import StrEnum


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"  # one probe in flight


CIRCUIT_STATES: tuple[str, ...] = tuple(s.value for s in CircuitState)


@dataclass(frozen=True, slots=True)
class Policy:
    failures: int = 3  # consecutive retryable failures that open the circuit
    probe_min: float = 1.0  # seconds before the first probe
    probe_max: float = 5.0  # the longest wait between probes (before jitter)
    retry_after_max: float = 300.0  # an endpoint's Retry-After is honoured up to this


@dataclass(frozen=True, slots=True)
class Circuit:
    """The endpoint's circuit as its row holds it; ``probe_in``: seconds until a probe may
    go (None while closed), from the database's clock."""

    state: CircuitState = CircuitState.CLOSED
    failures: int = 0
    backoff: float = 0.0
    probe_in: float | None = None


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
    if not o.failed:
        return Circuit()
    failures = c.failures + 1
    asked = min(o.retry_after, policy.retry_after_max) if o.retry_after is not None else None
    if c.state == CircuitState.CLOSED:
        if failures < policy.failures and asked is None:
            return replace(c, failures=failures)
        backoff = policy.probe_min
    else:  # a failed probe (or a late answer of a round sent before it opened)
        backoff = min(policy.probe_max, max(policy.probe_min, c.backoff * 2))
    # ``probe_in`` here: what the endpoint asked for, if anything; ``after`` adds the wait.
    return Circuit(CircuitState.OPEN, failures, backoff, asked)


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
