"""The in-memory store of ``inbox.testing`` with the receiver's claiming INSERT.

``InMemoryStore.insert`` is a ``Claims`` send function (``inbox.store.db.group_commit``), so
the group commit's batching runs without PostgreSQL; it raises the driver's own errors,
which is why it lives with the tests and not in the shipped fake.
"""

from __future__ import annotations

import copy
from typing import Any

import psycopg  # only its error classes: what the real statement raises
from sqlalchemy import create_engine

from inbox import testing
from inbox.infra.config import Settings
from inbox.services.runtime import Runtime


class InMemoryStore(testing.InMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.statements: list[list[str]] = []  # the public ids of each ``insert``
        self.refuse: set[str] = set()  # public ids whose row ``insert`` refuses (DataError)
        self.down: BaseException | None = None  # raised by every ``insert`` while set

    def insert(self, rows: list[tuple[Any, ...]]) -> dict[str, int]:
        """The claiming INSERT (``claim_connections.Connections.insert``) in memory: ON
        CONFLICT on (tenant, source, key) does nothing; one refused row fails the whole
        statement, as in PostgreSQL."""
        with self.lock:
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


def offline(settings: Settings) -> Runtime:
    """A runtime whose engine is never connected, for a use case given an in-memory store
    (``drain_once(..., store=...)``): a connection it opened anyway fails at once."""
    return Runtime(settings, create_engine("postgresql+psycopg://offline@127.0.0.1:1/offline"))
