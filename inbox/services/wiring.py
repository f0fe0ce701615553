"""Which adapter stands behind what a caller hands the services.

Services take either a port (``inbox.services.ports``) or an ``Engine``; an Engine means
the PostgreSQL adapters. This is the one place that choice is made, so the ports module
knows nothing but the domain.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine

from inbox.services.ports import DeliveryStore, WorkStore
from inbox.store.write.delivery_store import SqlDeliveryStore
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
