"""An in-memory store for unit tests of the services: the queue's rules in plain Python.

``InMemoryStore`` has the shape of ``inbox.services.ports.WorkStore`` (and ``insert`` is a
``Claims`` send function), so the runner, drain, heartbeat and group commit run against it
without PostgreSQL. It keeps the rules the services rely on, the way the SQL in
``inbox/store/write/queue.py`` and ``batch.py`` states them: leases with fence tokens and expiry on
the store's own clock, attempts counted at claim time, recovery points written once, effects
claimed once per business key, and every state change checked against
``inbox.domain.states.ALLOWED``. A transaction is all or nothing: a failure inside ``begin()``
leaves the store as it was. The clock only moves when a test calls ``advance``.

``tests/integration/test_work_store_contract.py`` runs the same scenarios against this store and
PostgreSQL's, so the fake cannot drift from the SQL unnoticed.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from inbox.domain import callbacks
from inbox.domain.callbacks import Outgoing
from inbox.domain.errors import LeaseLost
from inbox.domain.ordering import Newer, Position
from inbox.domain.records import Claim, EventId, LoadedEvent, TenantId
from inbox.domain.states import EventState, transition
from inbox.store.write.batch import Completion
from inbox.store.write.staleness import RETRY_SECONDS, Judgement


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
    trace_context: str | None = None  # the ingest's traceparent (inbox.infra.tracing)


@dataclass
class Delivery:
    public_id: str
    endpoint_id: int
    event_id: int | None
    event_type: str


@dataclass
class _Data:
    events: dict[int, Row] = field(default_factory=dict)
    effects: dict[tuple[int, str, bytes], int] = field(default_factory=dict)
    deliveries: dict[str, Delivery] = field(default_factory=dict)
    # tenant id -> [(endpoint id, event types or None)], enabled endpoints only
    endpoints: dict[int, list[tuple[int, tuple[str, ...] | None]]] = field(default_factory=dict)


class InMemoryStore:
    def __init__(self) -> None:
        self.now = 1_000.0
        self.data = _Data()
        self.transactions = 0  # committed transactions
        self.calls: list[str] = []  # every operation, in order
        self.statements: list[list[str]] = []  # the public ids of each ``insert``
        self.refuse: set[str] = set()  # public ids whose row ``insert`` refuses (DataError)
        self.down: BaseException | None = None  # raised by every ``insert`` while set
        self._lock = threading.RLock()
        self._next_id = 1

    # -- test helpers ---------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def add_event(self, body: bytes = b"{}", tenant: str = "acme", **fields: Any) -> int:
        """A received event, due now (what a successful claim at ingest leaves)."""
        with self._lock:
            event_id = self._next_id
            self._next_id += 1
            tenant_id = fields.pop("tenant_id", 1)
            self.data.events[event_id] = Row(
                id=event_id,
                public_id=fields.pop("public_id", f"evt_{event_id:04d}"),
                tenant_id=tenant_id,
                tenant=tenant,
                source=fields.pop("source", "orders"),
                body=body,
                available_at=self.now,
                received_at=self.now,
                **fields,
            )
            return event_id

    def add_endpoint(self, tenant_id: int, endpoint_id: int, event_types: Any = None) -> None:
        self.data.endpoints.setdefault(tenant_id, []).append((endpoint_id, event_types))

    def event(self, event_id: int) -> Row:
        return self.data.events[event_id]

    # -- transactions -----------------------------------------------------------------------

    @contextmanager
    def begin(self) -> Iterator[InMemoryStore]:
        """One transaction at a time; on an exception the data is put back as it was."""
        with self._lock:
            saved = copy.deepcopy(self.data)
            try:
                yield self
            except BaseException:
                self.data = saved
                raise
            self.transactions += 1

    def _move(self, row: Row, target: EventState) -> None:
        row.state = transition(row.state, target)

    def _live(self, c: Claim) -> Row:
        row = self.data.events.get(c.id)
        if (
            row is None
            or row.fence != c.fence
            or row.state != EventState.PROCESSING
            or row.lease_expires_at is None
            or row.lease_expires_at <= self.now
        ):
            raise LeaseLost()
        return row

    def _release(self, row: Row) -> None:
        row.lease_owner = None
        row.lease_expires_at = None

    # -- the WorkStore operations -------------------------------------------------------------

    def _due(self, row: Row) -> bool:
        if row.state != EventState.RECEIVED or row.available_at > self.now:
            return False
        if row.ordering_key is None:
            return True
        return not any(
            p.tenant_id == row.tenant_id
            and p.ordering_key == row.ordering_key
            and p.id < row.id
            and p.state in (EventState.RECEIVED, EventState.PROCESSING)
            for p in self.data.events.values()
        )

    def claim(self, tx: Any, owner: str, limit: int, lease_seconds: float) -> list[Claim]:
        """Up to ``limit`` due events, at most a fair share per tenant first, then the oldest."""
        self.calls.append("claim")
        due = sorted(
            (r for r in self.data.events.values() if self._due(r)),
            key=lambda r: (r.available_at, r.id),
        )
        tenants = sorted({r.tenant_id for r in due})
        share = max(1, -(-limit // max(1, len(tenants))))
        picked: list[Row] = []
        for tenant_id in tenants:
            picked += [r for r in due if r.tenant_id == tenant_id][:share]
        picked = picked[:limit]
        picked += [r for r in due if r not in picked][: limit - len(picked)]
        for row in picked:
            self._move(row, EventState.PROCESSING)
            row.lease_owner = owner
            row.lease_expires_at = self.now + lease_seconds
            row.fence += 1
            row.attempts += 1
        return sorted((Claim(EventId(r.id), r.fence) for r in picked), key=lambda c: c.id)

    def _loaded(self, row: Row) -> LoadedEvent:
        return LoadedEvent(
            id=EventId(row.id),
            public_id=row.public_id,
            tenant_id=TenantId(row.tenant_id),
            tenant=row.tenant,
            source=row.source,
            source_options=dict(row.source_options),
            event_type=row.event_type,
            business_key_digest=row.business_key_digest,
            content_type=row.content_type,
            body=row.body,
            attempts=row.attempts,
            max_attempts=row.max_attempts,
            sync=row.sync,
            steps=copy.deepcopy(row.steps),
            trace_context=row.trace_context,
            age_seconds=self.now - row.received_at,
        )

    def _held(self, c: Claim) -> Row | None:
        """The row while ``c`` names its current lease (expired or not), as a load sees it."""
        row = self.data.events.get(c.id)
        if row is None or row.fence != c.fence or row.state != EventState.PROCESSING:
            return None
        return row

    def load(self, tx: Any, c: Claim) -> LoadedEvent:
        self.calls.append("load")
        row = self._held(c)
        if row is None:
            raise LeaseLost()
        return self._loaded(row)

    def load_many(self, tx: Any, claims: list[Claim]) -> dict[int, LoadedEvent]:
        self.calls.append("load_many")
        rows = [row for c in claims if (row := self._held(c)) is not None]
        return {row.id: self._loaded(row) for row in rows}

    def record_steps(self, tx: Any, c: Claim, results: dict[str, Any], lease: float) -> None:
        self.calls.append("record_steps")
        row = self._live(c)
        if results:
            row.lease_expires_at = self.now + lease
            for name, result in results.items():
                row.steps.setdefault(name, copy.deepcopy(result))

    def claim_effect(self, tx: Any, c: Claim, tenant_id: int, name: str, bk: bytes) -> int:
        self.calls.append("claim_effect")
        return self.data.effects.setdefault((tenant_id, name, bk), c.id)

    def judge(self, tx: Any, c: Claim, tenant_id: int, bk: bytes, mine: Position) -> Judgement:
        """Stale or not against the newest completed event with the key; put back while
        another event with the key is running (``inbox/store/write/staleness.py``)."""
        self.calls.append("judge")
        row = self._live(c)
        same = [
            r
            for r in self.data.events.values()
            if r.id != c.id and r.tenant_id == tenant_id and r.business_key_digest == bk
        ]
        if any(
            r.state == EventState.PROCESSING
            and r.lease_expires_at is not None
            and r.lease_expires_at > self.now
            and (r.occurred_at is not None or r.version is not None)
            for r in same
        ):
            self._move(row, EventState.RECEIVED)
            self._release(row)
            row.attempts = max(row.attempts - 1, 0)
            row.available_at = self.now + RETRY_SECONDS
            return Judgement(busy=True)
        column = "occurred_at" if mine.occurred_at is not None else "version"
        done = [
            r for r in same if r.state == EventState.COMPLETED and getattr(r, column) is not None
        ]
        newest = max(done, key=lambda r: (getattr(r, column), r.id), default=None)
        newer = None
        if newest is not None and Position(newest.occurred_at, newest.version).newer_than(mine):
            newer = Newer(newest.public_id, newest.occurred_at, newest.version)
        row.occurred_at, row.version = mine.occurred_at, mine.version
        row.newer_event_id = newest.id if newer is not None and newest is not None else None
        return Judgement(newer=newer)

    def enqueue_deliveries(
        self,
        tx: Any,
        tenant_id: int,
        tenant: str,
        event_id: int | None,
        event_public_id: str,
        step: str,
        messages: list[Outgoing],
        replay: int = 0,
    ) -> set[int]:
        self.calls.append("enqueue_deliveries")
        rung: set[int] = set()
        for index, msg in enumerate(messages):
            for endpoint_id, types in self.data.endpoints.get(tenant_id, []):
                if types is not None and msg.event_type not in types:
                    continue
                public_id = callbacks.delivery_id(event_public_id, step, index, endpoint_id)
                self.data.deliveries.setdefault(
                    public_id, Delivery(public_id, endpoint_id, event_id, msg.event_type)
                )
                rung.add(endpoint_id)
        return rung

    def _finish(self, row: Row, outcome: str, decision: dict[str, Any], resp: Any) -> None:
        self._move(row, EventState.COMPLETED)
        self._release(row)
        row.outcome, row.decision, row.last_error = outcome, decision, None
        if resp is not None:
            row.response = resp.encode() if isinstance(resp, str) else resp

    def complete(
        self,
        tx: Any,
        c: Claim,
        outcome: str,
        decision: dict[str, Any],
        duplicate_of: int | None,
        sync_response: bytes | None,
    ) -> None:
        self.calls.append("complete")
        row = self._live(c)
        self._finish(row, outcome, decision, sync_response)
        row.duplicate_of = duplicate_of

    def complete_many(self, tx: Any, completions: list[Completion]) -> set[int]:
        self.calls.append("complete_many")
        done: set[int] = set()
        for x in completions:
            try:
                row = self._live(x.claim)
            except LeaseLost:
                continue
            for name, result in x.steps.items():
                row.steps.setdefault(name, copy.deepcopy(result))
            self._finish(row, x.outcome, x.decision, x.sync_response)
            done.add(row.id)
        return done

    def fail(
        self,
        tx: Any,
        c: Claim,
        error: BaseException,
        permanent: bool,
        delay: float,
        step: str | None = None,
    ) -> str:
        self.calls.append("fail")
        row = self._live(c)
        spent = permanent or row.attempts >= row.max_attempts
        self._move(row, EventState.QUARANTINED if spent else EventState.RECEIVED)
        self._release(row)
        row.available_at = self.now + delay
        row.last_error = type(error).__name__
        return str(row.state)

    def hold(self, tx: Any, c: Claim, reason: str) -> str:
        self.calls.append("hold")
        row = self._live(c)
        self._move(row, EventState.RECEIVED)
        self._release(row)
        row.attempts = max(row.attempts - 1, 0)
        row.available_at = float("inf")
        row.last_error = "PlaybookMissing"
        return "held"

    def extend(self, tx: Any, claims: list[Claim], lease_seconds: float) -> int:
        self.calls.append("extend")
        extended = 0
        for c in claims:
            try:
                row = self._live(c)
            except LeaseLost:
                continue
            row.lease_expires_at = self.now + lease_seconds
            extended += 1
        return extended

    def sweep_expired(self, tx: Any) -> tuple[int, int]:
        self.calls.append("sweep_expired")
        requeued = quarantined = 0
        for row in self.data.events.values():
            expires = row.lease_expires_at
            if row.state != EventState.PROCESSING or expires is None or expires > self.now:
                continue
            spent = row.attempts >= row.max_attempts
            self._move(row, EventState.QUARANTINED if spent else EventState.RECEIVED)
            self._release(row)
            row.available_at = self.now
            row.last_error = "LeaseExpired"
            quarantined += spent
            requeued += not spent
        return requeued, quarantined

    def due_count(self, tx: Any) -> int:
        self.calls.append("due_count")
        return sum(
            1
            for r in self.data.events.values()
            if r.state == EventState.RECEIVED and r.available_at <= self.now
        )

    # -- the claiming INSERT, as a ``Claims`` send function -------------------------------------

    def insert(self, rows: list[tuple[Any, ...]]) -> dict[str, int]:
        """The claiming INSERT (``claim_connections.Connections.insert``) in memory: ON
        CONFLICT on (tenant, source, key) does nothing; one refused row fails the whole
        statement, as in PostgreSQL."""
        import psycopg  # only its error classes: what the real statement raises

        with self._lock:
            self.statements.append([r[0] for r in rows])
            if self.down is not None:
                raise copy.copy(self.down)  # a new error per statement, as the driver does
            if any(r[0] in self.refuse for r in rows):
                raise psycopg.DataError("invalid input value")
            taken = {row.key for row in self.data.events.values() if row.key is not None}
            inserted: dict[str, int] = {}
            for r in rows:
                public_id, tenant_id, source_id, key_digest = r[:4]
                key = None if key_digest is None else (tenant_id, source_id, key_digest)
                if key is not None and key in taken:
                    continue
                event_id = self.add_event(
                    r[9], public_id=public_id, tenant_id=tenant_id, event_type=r[5], key=key
                )
                if key is not None:
                    taken.add(key)
                inserted[public_id] = event_id
            return inserted
