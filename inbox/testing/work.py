"""``InMemoryStore``: the event queue (``inbox.services.ports.WorkStore``) in plain Python.

It keeps the rules the services rely on the way the SQL in ``inbox/store/write/queue.py``,
``batch.py`` and ``staleness.py`` states them: leases with fence tokens and expiry on the
store's own clock, attempts counted at claim time, recovery points written once, effects
claimed once per business key, and every state change checked against
``inbox.domain.states.ALLOWED``. A transaction is all or nothing: a failure inside
``begin()`` leaves the store as it was. The clock only moves when a test calls ``advance``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from inbox.domain.callbacks import CallbackSet
from inbox.domain.errors import LeaseLost
from inbox.domain.ordering import RETRY_SECONDS, Judgement, Newer, Position
from inbox.domain.outcomes import RunOutcome
from inbox.domain.records import (
    Claim,
    Completion,
    Endpoint,
    EndpointId,
    EventId,
    LoadedEvent,
    TenantId,
)
from inbox.domain.states import EventState, transition
from inbox.testing._data import Memory, Row
from inbox.testing.deliveries import InMemoryDeliveries


class InMemoryStore(Memory):
    """A ``WorkStore`` whose transaction is the store itself; ``deliveries`` is the outbox
    over the same data (``InMemoryDeliveries``)."""

    def __init__(self) -> None:
        super().__init__()
        self.deliveries = InMemoryDeliveries(self)

    def add_event(self, body: bytes = b"{}", tenant: str = "acme", **fields: Any) -> EventId:
        """A received event, due now (what a successful claim at ingest leaves). ``fields``
        are ``Row``'s: ``source``, ``event_type``, ``tenant_id``, ``max_attempts``, …"""
        with self.lock:
            event_id = self.new_id()
            self.data.events[event_id] = Row(
                id=event_id,
                public_id=fields.pop("public_id", f"evt_{event_id:04d}"),
                tenant_id=fields.pop("tenant_id", 1),
                tenant=tenant,
                source=fields.pop("source", "orders"),
                body=body,
                available_at=self.now,
                received_at=self.now,
                **fields,
            )
            return EventId(event_id)

    def add_endpoint(
        self,
        tenant_id: int,
        endpoint_id: int,
        event_types: tuple[str, ...] | None = None,
        **fields: Any,
    ) -> Endpoint:
        """An enabled endpoint of the tenant (``InMemoryDeliveries.add_endpoint``)."""
        return self.deliveries.add_endpoint(tenant_id, endpoint_id, event_types, **fields)

    def event(self, event_id: int) -> Row:
        return self.data.events[event_id]

    def _move(self, row: Row, target: EventState) -> None:
        row.state = transition(row.state, target)
        if target == EventState.QUARANTINED:
            row.lane_skipped = False  # a new quarantine blocks its lane again

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

    # -- the WorkStore operations ---------------------------------------------------------------

    def _due(self, row: Row) -> bool:
        if row.state != EventState.RECEIVED or row.available_at > self.now:
            return False
        if row.ordering_key is None:
            return True
        return not any(
            p.tenant_id == row.tenant_id
            and p.ordering_key == row.ordering_key
            and (
                (p.state == EventState.PROCESSING and row.replay > 0)
                or (
                    p.id < row.id
                    and (
                        p.state in (EventState.RECEIVED, EventState.PROCESSING)
                        or (p.state == EventState.QUARANTINED and not p.lane_skipped)
                    )
                )
            )
            for p in self.data.events.values()
        )

    def claim(self, tx: Memory, owner: str, limit: int, lease_seconds: float) -> list[Claim]:
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
            lane=row.ordering_key,
            replay=row.replay,
        )

    def _held(self, c: Claim) -> Row | None:
        """The row while ``c`` names its current lease (expired or not), as a load sees it."""
        row = self.data.events.get(c.id)
        if row is None or row.fence != c.fence or row.state != EventState.PROCESSING:
            return None
        return row

    def load(self, tx: Memory, c: Claim) -> LoadedEvent:
        self.calls.append("load")
        row = self._held(c)
        if row is None:
            raise LeaseLost()
        return self._loaded(row)

    def load_many(self, tx: Memory, claims: list[Claim]) -> dict[EventId, LoadedEvent]:
        self.calls.append("load_many")
        rows = [row for c in claims if (row := self._held(c)) is not None]
        return {EventId(row.id): self._loaded(row) for row in rows}

    def record_steps(self, tx: Memory, c: Claim, results: dict[str, Any], lease: float) -> None:
        self.calls.append("record_steps")
        row = self._live(c)
        if results:
            row.lease_expires_at = self.now + lease
            for name, result in results.items():
                row.steps.setdefault(name, copy.deepcopy(result))

    def record_many(
        self, tx: Memory, points: list[tuple[Claim, dict[str, Any]]], lease: float
    ) -> set[EventId]:
        self.calls.append("record_many")
        live: set[EventId] = set()
        for c, results in points:
            try:
                row = self._live(c)
            except LeaseLost:
                continue
            row.lease_expires_at = self.now + lease
            for name, result in results.items():
                row.steps.setdefault(name, copy.deepcopy(result))
            live.add(EventId(row.id))
        return live

    def claim_effect(
        self, tx: Memory, c: Claim, tenant_id: TenantId, name: str, bk: bytes
    ) -> EventId:
        self.calls.append("claim_effect")
        return EventId(self.data.effects.setdefault((tenant_id, name, bk), c.id))

    def judge(
        self, tx: Memory, c: Claim, tenant_id: TenantId, bk: bytes, mine: Position
    ) -> Judgement:
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

    def enqueue_deliveries(self, tx: Memory, sets: Sequence[CallbackSet]) -> set[EndpointId]:
        self.calls.append("enqueue_deliveries")
        return self.deliveries.enqueue(sets)

    def _finish(
        self, row: Row, outcome: str, decision: dict[str, Any], resp: bytes | str | None
    ) -> None:
        self._move(row, EventState.COMPLETED)
        self._release(row)
        row.outcome, row.decision, row.last_error = outcome, decision, None
        if resp is not None:
            row.response = resp.encode() if isinstance(resp, str) else resp

    def complete(
        self,
        tx: Memory,
        c: Claim,
        outcome: RunOutcome,
        decision: dict[str, Any],
        duplicate_of: EventId | None,
        sync_response: bytes | None,
    ) -> None:
        self.calls.append("complete")
        row = self._live(c)
        self._finish(row, outcome, decision, sync_response)
        row.duplicate_of = duplicate_of

    def complete_many(self, tx: Memory, completions: list[Completion]) -> set[EventId]:
        self.calls.append("complete_many")
        done: set[EventId] = set()
        for x in completions:
            try:
                row = self._live(x.claim)
            except LeaseLost:
                continue
            for name, result in x.steps.items():
                row.steps.setdefault(name, copy.deepcopy(result))
            self._finish(row, x.outcome, x.decision, x.sync_response)
            done.add(x.claim.id)
        return done

    def fail(
        self,
        tx: Memory,
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

    def hold(self, tx: Memory, c: Claim, reason: str) -> str:
        self.calls.append("hold")
        row = self._live(c)
        self._move(row, EventState.RECEIVED)
        self._release(row)
        row.attempts = max(row.attempts - 1, 0)
        row.available_at = float("inf")
        row.last_error = "PlaybookMissing"
        return "held"

    def extend(self, tx: Memory, claims: list[Claim], lease_seconds: float) -> int:
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

    def sweep_expired(self, tx: Memory) -> tuple[int, int]:
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

    def due_count(self, tx: Memory) -> int:
        self.calls.append("due_count")
        return sum(1 for r in self.data.events.values() if self._due(r))
