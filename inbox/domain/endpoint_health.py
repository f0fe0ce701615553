"""An endpoint's state, defined once: what the console, the CLI, the admin API and
``/metrics`` all show (``inbox_endpoint_state``), from the same inputs.

- ``disabled``: nothing is sent (an operator, or a 410 Gone); its deliveries are held.
- ``paused``: an operator paused it; its deliveries are held.
- ``open_circuit``: its circuit breaker is open or half open (``inbox.domain.circuit``):
  one probe at a time, the rest wait.
- ``degraded``: it is sent to, but more than ``DEGRADED_FAILURE_RATE`` of its attempts in
  the last ``WINDOW_MINUTES`` got no 2xx.
- ``healthy``: otherwise (including an endpoint with no recent attempt).

The first that applies wins, in that order. Pure: no framework or driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

WINDOW_MINUTES = 15
DEGRADED_FAILURE_RATE = 0.1


class EndpointState(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    OPEN_CIRCUIT = "open_circuit"
    PAUSED = "paused"
    DISABLED = "disabled"


ENDPOINT_STATES: tuple[str, ...] = tuple(s.value for s in EndpointState)


@dataclass(frozen=True, slots=True)
class Recent:
    """Its attempts in the last WINDOW_MINUTES, and how many got no 2xx."""

    attempts: int = 0
    failures: int = 0

    @property
    def failure_rate(self) -> float:
        return self.failures / self.attempts if self.attempts else 0.0


def state_of(enabled: bool, paused: bool, circuit: str, recent: Recent) -> EndpointState:
    if not enabled:
        return EndpointState.DISABLED
    if paused:
        return EndpointState.PAUSED
    if circuit != "closed":
        return EndpointState.OPEN_CIRCUIT
    if recent.failure_rate > DEGRADED_FAILURE_RATE:
        return EndpointState.DEGRADED
    return EndpointState.HEALTHY


def label(state: EndpointState | str) -> str:
    """How a person reads it: ``open circuit``."""
    return str(state).replace("_", " ")
