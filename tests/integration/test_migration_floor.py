"""Migration 0015: the ledger floor covers the deliveries waiting when it runs, so the
couriers' claim (bounded by the floor from then on) finds a retry due since an earlier
day before the first sweep has run."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import create_engine, text

from inbox.domain import ledger
from inbox.domain.sources import SourceOptions
from inbox.store.db.engine import sqlalchemy_url
from inbox.store.schema import migrate, partitions
from inbox.store.write import deliveries
from inbox.store.write import sources as sstore
from tests.integration.ledger_support import put_delivery, put_event


def test_the_floor_comes_down_to_a_waiting_delivery(empty_db: str) -> None:
    migrate.upgrade(empty_db, "0014_day_foreign_keys")
    engine = create_engine(sqlalchemy_url(empty_db))
    try:
        with engine.begin() as conn:
            old = partitions.today(conn) - dt.timedelta(days=5)
            partitions.make_day(conn, old)
            sstore.create_tenant(conn, "acme")
            src = sstore.create_source(conn, "acme", "hooks", "hmac", ["s3cret"], SourceOptions())
            event_id, _ = put_event(conn, old, 1, src, "completed")
            put_delivery(conn, old, 1, src, event_id, "pending")
            # the floor as 0013 left it: above every unfinished event, blind to deliveries
            conn.execute(text("UPDATE ledger_floor SET floor = :f"), {"f": ledger.bounds(old)[1]})
        migrate.upgrade(empty_db)
        with engine.begin() as conn:
            floor = conn.execute(text("SELECT floor FROM ledger_floor")).scalar_one()
            assert floor == ledger.make_id(old, 1)
            endpoint_id = conn.execute(text("SELECT endpoint_id FROM deliveries")).scalar_one()
            claimed = deliveries.claim(conn, endpoint_id, "c", 8, 30)
            assert [c.id for c in claimed] == [ledger.make_id(old, 1)]
        migrate.downgrade(empty_db, "0014_day_foreign_keys")  # nothing to undo: still lower
    finally:
        engine.dispose()
