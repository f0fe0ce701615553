"""What the runner, drain and heartbeat need of the store, as a Protocol.

They call the store only through a ``WorkStore``: a transaction (``begin``) and the queue's
operations, each taking that transaction first. ``inbox.store.write.work.SqlWorkStore`` is the
PostgreSQL one; the unit tests' in-memory store is another, so the services' logic (recovery
points, fencing, retries, batching) is tested without a database. Services also accept an
``Engine``, which stands for the PostgreSQL store.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from sqlalchemy import Engine

from inbox.domain.callbacks import Outgoing
from inbox.domain.ordering import Position
from inbox.domain.outcomes import RunOutcome
from inbox.domain.records import Claim, LoadedEvent
from inbox.store.write.batch import Completion
from inbox.store.write.staleness import Judgement
from inbox.store.write.work import SqlWorkStore


class WorkStore(Protocol):
    """``tx`` is whatever ``begin()`` yields; every write that names a claim is fenced and
    raises ``LeaseLost`` when the lease is no longer that claim's."""

    def begin(self) -> AbstractContextManager[Any]: ...

    def claim(self, tx: Any, owner: str, limit: int, lease_seconds: float) -> list[Claim]: ...

    def load(self, tx: Any, c: Claim) -> LoadedEvent: ...

    def load_many(self, tx: Any, claims: list[Claim]) -> dict[int, LoadedEvent]: ...

    def record_steps(self, tx: Any, c: Claim, results: dict[str, Any], lease: float) -> None: ...

    def claim_effect(self, tx: Any, c: Claim, tenant_id: int, name: str, bk: bytes) -> int: ...

    def judge(self, tx: Any, c: Claim, tenant_id: int, bk: bytes, mine: Position) -> Judgement: ...

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
    ) -> set[int]: ...

    def complete(
        self,
        tx: Any,
        c: Claim,
        outcome: RunOutcome,
        decision: dict[str, Any],
        duplicate_of: int | None,
        sync_response: bytes | None,
    ) -> None: ...

    def complete_many(self, tx: Any, completions: list[Completion]) -> set[int]: ...

    def fail(
        self,
        tx: Any,
        c: Claim,
        error: BaseException,
        permanent: bool,
        delay: float,
        step: str | None = None,
    ) -> str: ...

    def hold(self, tx: Any, c: Claim, reason: str) -> str: ...

    def extend(self, tx: Any, claims: list[Claim], lease_seconds: float) -> int: ...

    def sweep_expired(self, tx: Any) -> tuple[int, int]: ...

    def due_count(self, tx: Any) -> int: ...


def work_store(db: Engine | WorkStore) -> WorkStore:
    """The store behind ``db``: an Engine is PostgreSQL's."""
    return SqlWorkStore(db) if isinstance(db, Engine) else db
