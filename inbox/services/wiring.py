"""Which adapter stands behind what a caller hands the services.

Services take either a port (``inbox.services.ports``) or an ``Engine`` (a ``Runtime``'s,
when no port is given); an Engine means the PostgreSQL adapters. This is the one place
that choice is made, so the ports module knows nothing but the domain.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine

from inbox.services.ports import (
    BulkStore,
    DeliveryStore,
    GapfillStore,
    ReconcileStore,
    WorkStore,
)
from inbox.store.write.delivery_store import SqlDeliveryStore
from inbox.store.write.job_stores import SqlBulkStore, SqlGapfillStore, SqlReconcileStore
from inbox.store.write.work import SqlWorkStore


def work_store(db: Engine | WorkStore[Any]) -> WorkStore[Any]:
    """The event queue behind ``db``: an Engine is PostgreSQL's."""
    if isinstance(db, Engine):
        sql: WorkStore[Connection] = SqlWorkStore(db)
        return sql
    return db


def delivery_store(db: Engine | DeliveryStore[Any]) -> DeliveryStore[Any]:
    """The outbox behind ``db``: an Engine is PostgreSQL's."""
    if isinstance(db, Engine):
        sql: DeliveryStore[Connection] = SqlDeliveryStore(db)
        return sql
    return db


def bulk_store(engine: Engine) -> BulkStore[Any]:
    """The bulk replays' jobs and items in PostgreSQL."""
    sql: BulkStore[Connection] = SqlBulkStore(engine)
    return sql


def reconcile_store(engine: Engine) -> ReconcileStore[Any]:
    """What a reconcile reads, in PostgreSQL."""
    sql: ReconcileStore[Connection] = SqlReconcileStore(engine)
    return sql


def gapfill_store(engine: Engine) -> GapfillStore[Any]:
    """What a gap fill reads and writes, in PostgreSQL."""
    sql: GapfillStore[Connection] = SqlGapfillStore(engine)
    return sql
