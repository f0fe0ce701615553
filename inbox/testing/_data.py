"""The rows the in-memory stores keep: one set of data shared by the queue and the outbox."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from inbox.domain.records import Endpoint
from inbox.domain.states import DeliveryState, EventState


@dataclass
class Row:
    """One event as the store holds it."""

    id: int
    public_id: str
    tenant_id: int
    tenant: str
    source: str
    body: bytes
    event_type: str | None = None
    business_key_digest: bytes | None = None
    ordering_key: bytes | None = None
    # A quarantined event of a lane blocks the lane's later events until an operator
    # replays or skips it (``lane_blocks``); True once skipped.
    lane_skipped: bool = False
    replay: int = 0  # 0 for the original processing; each operator replay adds one
    source_options: dict[str, Any] = field(default_factory=dict)
    content_type: str = "application/json"
    max_attempts: int = 5
    sync: bool = False
    state: EventState = EventState.RECEIVED
    available_at: float = 0.0
    received_at: float = 0.0
    attempts: int = 0
    fence: int = 0
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    steps: dict[str, Any] = field(default_factory=dict)
    outcome: str | None = None
    decision: dict[str, Any] | None = None
    duplicate_of: int | None = None
    response: bytes | None = None
    last_error: str | None = None
    key: tuple[Any, ...] | None = None
    occurred_at: Any = None  # the provider's event time or version (inbox.domain.ordering)
    version: Any = None
    newer_event_id: int | None = None
    trace_context: str | None = None  # the ingest's traceparent


@dataclass(frozen=True)
class Attempt:
    """One recorded delivery attempt (``delivery_attempts``)."""

    at: datetime
    status: int | None
    error: str | None
    latency_ms: float
    excerpt: str | None


@dataclass
class Delivery:
    """One outbound callback as the outbox holds it."""

    id: int
    public_id: str
    tenant_id: int
    endpoint_id: int
    event_id: int | None
    event_type: str
    body: bytes = b""
    replay: int = 0
    state: DeliveryState = DeliveryState.PENDING
    available_at: float = 0.0
    attempts: int = 0
    fence: int = 0
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    last_status: int | None = None
    last_error: str | None = None
    finished_at: float | None = None
    trace_context: str | None = None
    log: list[Attempt] = field(default_factory=list)


@dataclass
class Data:
    events: dict[int, Row] = field(default_factory=dict)
    effects: dict[tuple[int, str, bytes], int] = field(default_factory=dict)
    deliveries: dict[str, Delivery] = field(default_factory=dict)  # by public id
    endpoints: dict[int, Endpoint] = field(default_factory=dict)


class Memory:
    """The data, clock and transactions the in-memory queue and outbox share."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self.data = Data()
        self.transactions = 0  # committed transactions
        self.calls: list[str] = []  # every operation, in order
        self.lock = threading.RLock()
        self._next_id = 1

    def advance(self, seconds: float) -> None:
        """Move the clock (leases, retries and delays are measured on it)."""
        self.now += seconds

    def new_id(self) -> int:
        with self.lock:
            self._next_id += 1
            return self._next_id - 1

    @contextmanager
    def begin(self) -> Iterator[Memory]:
        """One transaction at a time; on an exception the data is put back as it was."""
        with self.lock:
            saved = copy.deepcopy(self.data)
            try:
                yield self
            except BaseException:
                self.data = saved
                raise
            self.transactions += 1
