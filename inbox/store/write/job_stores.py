"""The bulk replay runner's, the reconcile's and the gap fill's stores over PostgreSQL:
``inbox.services.ports.BulkStore``, ``ReconcileStore`` and ``GapfillStore``.

``begin`` is the engine's transaction (the reconcile's, a connection's: it only reads);
every other method is a statement of the store's rooms, called with it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from sqlalchemy import Connection, Engine

from inbox.domain.intake import Prepared
from inbox.domain.records import Source, TenantId
from inbox.store.db import sealing
from inbox.store.reads import bulk as bulk_reads
from inbox.store.reads import reconcile as reconcile_reads
from inbox.store.reads.sources import list_sources
from inbox.store.write import bulk, deliveries, operator, reconciled


class _OnEngine:
    """A store over an engine: each ``begin`` a transaction of its own."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def begin(self) -> AbstractContextManager[Connection]:
        return self.engine.begin()


class SqlBulkStore(_OnEngine):
    claim = staticmethod(bulk.claim)
    renew = staticmethod(bulk.renew)
    release = staticmethod(bulk.release)
    record = staticmethod(bulk.record)
    status = staticmethod(bulk_reads.status)
    next_items = staticmethod(bulk_reads.next_items)
    replayed_since = staticmethod(bulk_reads.replayed_since)
    replay_events = staticmethod(operator.replay)
    replay_deliveries = staticmethod(deliveries.replay)


class SqlReconcileStore(_OnEngine):
    def begin(self) -> AbstractContextManager[Connection]:
        return self.engine.connect()  # reads only: nothing to commit

    window_start = staticmethod(reconcile_reads.window_start)
    known_digests = staticmethod(reconcile_reads.known_digests)
    events_since = staticmethod(reconcile_reads.events_since)


class SqlGapfillStore(_OnEngine):
    def seal(self, tenant_id: TenantId, ev: Prepared) -> Prepared:
        return sealing.for_engine(self.engine).seal(tenant_id, ev)

    @staticmethod
    def sources(conn: Connection) -> list[Source]:
        return list_sources(conn)

    window_start = staticmethod(reconcile_reads.window_start)
    last_run = staticmethod(reconcile_reads.last_run)
    known_digests = staticmethod(reconcile_reads.known_digests)
    import_event = staticmethod(reconciled.import_event)
    record_run = staticmethod(reconciled.record_run)
