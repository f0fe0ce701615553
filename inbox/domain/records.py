"""The domain's records: what the store hands back and the services work on.

Frozen dataclasses; ids are ``NewType`` s of int so a tenant id cannot be passed where a source
id is meant.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NewType, Protocol

from inbox.domain.circuit import Circuit
from inbox.domain.outcomes import RunOutcome
from inbox.domain.sources import SourceOptions

TenantId = NewType("TenantId", int)
SourceId = NewType("SourceId", int)
EventId = NewType("EventId", int)
EndpointId = NewType("EndpointId", int)
DeliveryId = NewType("DeliveryId", int)
BulkJobId = NewType("BulkJobId", int)


@dataclass(frozen=True, slots=True)
class Tenant:
    id: TenantId
    name: str
    disabled: bool
    # Fairness (inbox.store.write.queue's claim): at most this many of its events run at
    # once (None: no cap); its share of each claim against the other tenants' weights.
    max_in_flight: int | None = None
    weight: int = 1


@dataclass(frozen=True, slots=True)
class Source:
    id: SourceId
    tenant_id: TenantId
    tenant: str
    name: str
    scheme: str
    enabled: bool
    options: SourceOptions
    secrets: tuple[str, ...]
    # The secrets' row ids, in the same order (the verdict names the one that matched).
    secret_ids: tuple[int, ...] = ()

    @property
    def path(self) -> str:
        return f"/hooks/{self.tenant}/{self.name}"


@dataclass(frozen=True)
class Claim:
    id: EventId
    fence: int


@dataclass(frozen=True)
class LoadedEvent:
    id: EventId
    public_id: str
    tenant_id: TenantId
    tenant: str
    source: str
    source_options: dict[str, Any]
    event_type: str | None
    business_key_digest: bytes | None
    content_type: str
    body: bytes
    attempts: int
    max_attempts: int
    sync: bool
    steps: dict[str, Any]
    # Seconds since the event was received, by the database clock, when it was loaded.
    age_seconds: float = 0.0
    # 0 for the original processing; each operator replay adds one.
    replay: int = 0
    # The ingest's W3C traceparent (None when it was not traced): its runs continue it.
    trace_context: str | None = None
    # Its lane (``events.ordering_key``): set when its source runs one business key at a
    # time; finishing it lets the lane's next event run (inbox.services.drain wakes it).
    lane: bytes | None = None
    # Its payload key was destroyed (inbox.domain.erasure): ``body`` is empty, nothing runs.
    erased: bool = False
    # Its tenant has an in-flight cap (``tenants.max_in_flight``): finishing it frees a slot.
    capped: bool = False

    @property
    def opens_next(self) -> bool:
        """Completing it may make another event claimable at once (its lane's next, or its
        capped tenant's next): the drain claims again rather than stop."""
        return self.lane is not None or self.capped


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: EndpointId
    public_id: str
    tenant_id: TenantId
    tenant: str
    url: str
    event_types: tuple[str, ...] | None
    enabled: bool
    disabled_reason: str | None
    max_attempts: int
    retry_schedule: tuple[int, ...]
    timeout_ms: int
    max_in_flight: int
    secrets: tuple[str, ...]
    failing: bool = False
    filter: str | None = None  # a CEL expression over type and payload (inbox.domain.filters)
    paused: bool = False  # an operator's pause: like disabled, its deliveries are held
    rate_per_second: float | None = None  # across every courier; None: unlimited
    ordered: bool = False  # one in flight; the next after the previous is delivered or dead
    deleted: bool = False  # an operator deleted it: the row stays, nothing is sent or made

    @property
    def sends(self) -> bool:
        """Its deliveries are attempted; otherwise they are held (never dropped)."""
        return self.enabled and not self.paused


@dataclass(frozen=True)
class Completion:
    """A claimed event run in memory to its end: its steps' results and its outcome, for
    the drain to complete with others in one statement (fenced by ``claim``)."""

    claim: Claim
    steps: dict[str, Any]
    outcome: RunOutcome
    decision: dict[str, Any]
    sync_response: str | None


@dataclass(frozen=True)
class ClaimedDelivery:
    """A delivery leased to one courier: ``fence`` fences every write about it."""

    id: DeliveryId
    fence: int
    public_id: str
    body: bytes | None  # None: sealed under a key an erasure destroyed (never sent)
    attempts: int
    replay: int = 0
    trace_context: str | None = None  # the W3C traceparent of the step that made it
    probe: bool = False  # its endpoint's circuit is open: a probe, its budget not spent


@dataclass(frozen=True)
class CourierRound:
    """What one courier's claim found, read in the claim's own transaction: the endpoint,
    its circuit after the claim (half open once a probe is leased), the deliveries leased,
    and, when none were, the seconds until its rate limit's next token (None: no limit
    held them back)."""

    endpoint: Endpoint
    circuit: Circuit
    claims: list[ClaimedDelivery]
    throttled: float | None = None


class DeliveryAttempt(Protocol):
    """One attempt's result as the store records it (the courier's ``Sent``)."""

    @property
    def claim(self) -> ClaimedDelivery: ...
    @property
    def at(self) -> datetime: ...
    @property
    def state(self) -> str: ...  # delivered | pending (retry) | failed (dead letter)
    @property
    def status(self) -> int | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def delay(self) -> float: ...
    @property
    def latency_ms(self) -> float: ...
    @property
    def excerpt(self) -> str | None: ...
