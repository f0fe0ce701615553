"""Migrations: an empty database upgrades to exactly the table definitions, and back."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from inbox.domain import ledger
from inbox.store.db.engine import sqlalchemy_url
from inbox.store.schema import migrate
from inbox.store.schema.tables import PARTITIONED, metadata


def _not_a_partition(name: str | None, type_: str, parent_names: object) -> bool:
    """A day's partition (or the DEFAULT one) is made by inbox.store.schema.partitions, not in
    tables.py: the comparison covers the partitioned parents."""
    if type_ != "table" or name is None:
        return True
    return not any(
        name == f"{t}_default" or ledger.day_of_partition(t, name) is not None for t in PARTITIONED
    )


def test_upgrade_matches_tables_then_downgrade_empties(empty_db: str) -> None:
    migrate.upgrade(empty_db)
    engine = create_engine(sqlalchemy_url(empty_db))
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={"include_name": _not_a_partition},
        )
        diff = compare_metadata(context, metadata)
        assert diff == [], f"migrations and inbox/store/schema/tables.py disagree: {diff}"
    migrate.downgrade(empty_db, "base")
    with engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) == {"alembic_version"}
        fn = conn.execute(text("SELECT count(*) FROM pg_proc WHERE proname LIKE 'inbox_%'"))
        assert fn.scalar_one() == 0
    engine.dispose()
