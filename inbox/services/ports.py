"""What the services need of the store, as Protocols over the domain's types alone.

The runner, drain and heartbeat call the store only through a ``WorkStore``; the courier
only through a ``DeliveryStore``; the bulk replay runner through a ``BulkStore``; the
reconcile through a ``ReconcileStore`` and the gap fill through a ``GapfillStore``. Each is
a transaction (``begin``) and operations that take that transaction first. ``Tx`` is the
adapter's own transaction type: PostgreSQL's (``inbox.store.write.work.SqlWorkStore``,
``inbox.store.write.delivery_store``, ``inbox.store.write.job_stores``) is a SQLAlchemy
``Connection``; the in-memory stores of ``inbox.testing`` hand themselves out.
Which adapter stands behind an ``Engine`` is decided in ``inbox.services.wiring``, not here:
this module imports the domain and nothing else (an import-linter contract says so).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, TypeVar

from inbox.domain.approval import BulkStatus, Job
from inbox.domain.callbacks import CallbackSet
from inbox.domain.circuit import Change, Circuit
from inbox.domain.intake import Prepared
from inbox.domain.ordering import Judgement, Position
from inbox.domain.outcomes import RunOutcome
from inbox.domain.records import (
    BulkJobId,
    Claim,
    ClaimedDelivery,
    Completion,
    CourierRound,
    DeliveryAttempt,
    DeliveryId,
    Endpoint,
    EndpointId,
    EventId,
    LoadedEvent,
    Source,
    SourceId,
    TenantId,
)

Tx = TypeVar("Tx")


class WorkStore(Protocol[Tx]):
    """The event queue. Every write that names a claim is fenced and raises ``LeaseLost``
    when the lease is no longer that claim's."""

    def begin(self) -> AbstractContextManager[Tx]: ...

    def claim(self, tx: Tx, owner: str, limit: int, lease_seconds: float) -> list[Claim]: ...

    def load(self, tx: Tx, c: Claim) -> LoadedEvent: ...

    def load_many(self, tx: Tx, claims: list[Claim]) -> dict[EventId, LoadedEvent]: ...

    def record_steps(self, tx: Tx, c: Claim, results: dict[str, Any], lease: float) -> None: ...

    def record_many(
        self, tx: Tx, points: list[tuple[Claim, dict[str, Any]]], lease: float
    ) -> set[EventId]:
        """Each claim's recovery points and a longer lease, for the claims still live (their
        ids, returned); a lost claim is left out, not raised."""
        ...

    def claim_effect(
        self, tx: Tx, c: Claim, tenant_id: TenantId, name: str, bk: bytes
    ) -> EventId: ...

    def judge(
        self, tx: Tx, c: Claim, tenant_id: TenantId, bk: bytes, mine: Position
    ) -> Judgement: ...

    def enqueue_deliveries(self, tx: Tx, sets: Sequence[CallbackSet]) -> set[EndpointId]:
        """The deliveries every callback set owes, written in ``tx`` (held for an endpoint
        that does not send now); the endpoints to ring."""
        ...

    def complete(
        self,
        tx: Tx,
        c: Claim,
        outcome: RunOutcome,
        decision: dict[str, Any],
        duplicate_of: EventId | None,
        sync_response: bytes | None,
    ) -> None: ...

    def complete_many(self, tx: Tx, completions: list[Completion]) -> set[EventId]: ...

    def fail(
        self,
        tx: Tx,
        c: Claim,
        error: BaseException,
        permanent: bool,
        delay: float,
        step: str | None = None,
    ) -> str: ...

    def hold(self, tx: Tx, c: Claim, reason: str) -> str: ...

    def extend(self, tx: Tx, claims: list[Claim], lease_seconds: float) -> int: ...

    def sweep_expired(self, tx: Tx) -> tuple[int, int]: ...

    def due_count(self, tx: Tx) -> int: ...


class DeliveryStore(Protocol[Tx]):
    """The outbox: deliveries leased per endpoint, in order. ``finish_many`` and
    ``release`` are fenced per delivery (a delivery swept and claimed again is not
    touched by the courier that lost it); attempts are recorded whatever the fence."""

    def begin(self) -> AbstractContextManager[Tx]: ...

    def endpoint(self, tx: Tx, endpoint_id: EndpointId) -> Endpoint:
        """The endpoint; ``NotFound`` when there is none."""
        ...

    def claim(
        self, tx: Tx, endpoint_id: EndpointId, owner: str, limit: int, lease: float
    ) -> list[ClaimedDelivery]:
        """Up to ``limit`` due deliveries of an endpoint that sends (neither paused nor
        disabled), oldest due first, when it has a free in-flight slot (one while it is
        failing), its circuit is closed and its rate limit has a token per delivery (up to
        ``rate_per_second``, across every courier); while the circuit is open, one probe (the
        oldest, ``probe`` set, its attempts not counted) once the probe is due and nothing
        else is being sent; the circuit is then half open."""
        ...

    def claim_round(
        self,
        tx: Tx,
        endpoint_id: EndpointId,
        owner: str,
        limit: int,
        lease_for: Callable[[Endpoint], float],
    ) -> CourierRound | None:
        """A courier's ``claim`` (its lease ``lease_for`` the endpoint) with the endpoint,
        its circuit after the claim and, when nothing was leased, its rate limit's wait:
        in as few round trips as the store can. None at once, without waiting, when another
        courier holds the endpoint (its claim or its record is under way): no slot now;
        ``NotFound`` when there is no such endpoint."""
        ...

    def circuit(self, tx: Tx, endpoint_id: EndpointId) -> Circuit:
        """The endpoint's circuit breaker (``inbox.domain.circuit``), its row locked."""
        ...

    def throttled(self, tx: Tx, endpoint_id: EndpointId) -> float | None:
        """Seconds until its rate limit lets the next delivery go (None: it may now)."""
        ...

    def set_circuit(self, tx: Tx, endpoint_id: EndpointId, change: Change) -> None:
        """Write the circuit back; a close makes every pending delivery due now."""
        ...

    def finish_many(self, tx: Tx, sent: Sequence[DeliveryAttempt]) -> set[DeliveryId]:
        """Record attempts and new states; the ids whose lease was still ours."""
        ...

    def release(self, tx: Tx, claims: list[ClaimedDelivery], delay: float) -> None:
        """Give back claimed deliveries that were not attempted (uncounted)."""
        ...

    def set_failing(self, tx: Tx, endpoint_id: EndpointId, failing: bool) -> None: ...

    def disable(self, tx: Tx, endpoint_id: EndpointId, reason: str) -> None: ...

    def sweep(self, tx: Tx) -> list[EndpointId]:
        """Expired leases back to pending (failed when out of attempts); the enabled
        endpoints with due deliveries, to ring."""
        ...


class BulkItem(Protocol):
    """One item a bulk replay snapshotted: the event's or delivery's row id and public id."""

    @property
    def subject_id(self) -> int: ...
    @property
    def public_id(self) -> str: ...


class BulkStore(Protocol[Tx]):
    """A bulk replay's job (leased to one runner), its snapshotted items, and the replays
    that move them (``inbox.services.bulk.run_bulk_once``)."""

    def begin(self) -> AbstractContextManager[Tx]: ...

    def claim(self, tx: Tx, job_id: BulkJobId, owner: str, lease: float) -> Job | None:
        """The job leased to ``owner``; None when another runner holds it or it is done."""
        ...

    def renew(self, tx: Tx, job_id: BulkJobId, owner: str, lease: float) -> Job | None:
        """A longer lease; None when the job was cancelled or the lease lost."""
        ...

    def release(self, tx: Tx, job_id: BulkJobId, owner: str) -> None: ...

    def status(self, tx: Tx, job_id: BulkJobId) -> BulkStatus | None: ...

    def next_items(self, tx: Tx, job_id: BulkJobId, limit: int) -> Sequence[BulkItem]: ...

    def record(self, tx: Tx, job_id: BulkJobId, outcomes: dict[int, str]) -> Job:
        """Each item's outcome (by subject id), the job's counters; the job afterwards."""
        ...

    def replayed_since(self, tx: Tx, kind: str, ids: list[int], since: datetime) -> set[int]:
        """The subject ids someone replayed after ``since`` (skipped, not replayed twice)."""
        ...

    def replay_events(
        self, tx: Tx, public_ids: list[str], actor: str, detail: dict[str, Any]
    ) -> list[str]:
        """Quarantined events back to received, audited; the public ids moved."""
        ...

    def replay_deliveries(
        self, tx: Tx, public_ids: list[str], actor: str, detail: dict[str, Any]
    ) -> list[tuple[str, int]]:
        """Failed deliveries back to pending, audited; (public id, endpoint id) moved."""
        ...


class WindowEvent(Protocol):
    """A source's event received inside a reconcile's window."""

    @property
    def public_id(self) -> str: ...
    @property
    def key_digest(self) -> bytes | None: ...


class ReconcileStore(Protocol[Tx]):
    """What ``inbox.services.reconcile`` reads: the key digests a source holds and the
    events of its window, by the database clock."""

    def begin(self) -> AbstractContextManager[Tx]: ...

    def window_start(self, tx: Tx, hours: int) -> datetime:
        """The database clock's now, less ``hours``."""
        ...

    def known_digests(
        self, tx: Tx, tenant_id: TenantId, source_id: SourceId, digests: Sequence[bytes]
    ) -> set[bytes]: ...

    def events_since(
        self, tx: Tx, tenant_id: TenantId, source_id: SourceId, since: datetime
    ) -> Sequence[WindowEvent]: ...


class GapfillStore(Protocol[Tx]):
    """What ``inbox.services.gapfill`` needs: the sources due a run, the key digests they
    hold, and the import (sealed as an ingest is) and record of what it found."""

    def begin(self) -> AbstractContextManager[Tx]: ...

    def sources(self, tx: Tx) -> list[Source]: ...

    def window_start(self, tx: Tx, hours: int) -> datetime: ...

    def last_run(self, tx: Tx, source_id: SourceId) -> datetime | None: ...

    def known_digests(
        self, tx: Tx, tenant_id: TenantId, source_id: SourceId, digests: Sequence[bytes]
    ) -> set[bytes]: ...

    def seal(self, tenant_id: TenantId, ev: Prepared) -> Prepared:
        """``ev`` sealed under its tenant's data key (unchanged while sealing is off)."""
        ...

    def import_event(self, tx: Tx, source: Source, ev: Prepared, fetcher: str) -> bool:
        """Claim ``ev``'s key as a new event; False when the inbox holds it already."""
        ...

    def record_run(self, tx: Tx, source: Source, counts: dict[str, int]) -> None: ...
