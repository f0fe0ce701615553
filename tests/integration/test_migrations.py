"""Migrations: an empty database upgrades to exactly the table definitions, and back."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from inbox.store import migrate
from inbox.store.engine import sqlalchemy_url
from inbox.store.tables import metadata


@pytest.fixture
def empty_db(pg_server_url: str):
    name = f"inbox_mig_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = pg_server_url.partition("?")
    url = base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")
    yield url
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_upgrade_matches_tables_then_downgrade_empties(empty_db: str) -> None:
    migrate.upgrade(empty_db)
    engine = create_engine(sqlalchemy_url(empty_db))
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
        assert diff == [], f"migrations and inbox/store/tables.py disagree: {diff}"
    migrate.downgrade(empty_db, "base")
    with engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) == {"alembic_version"}
        fn = conn.execute(text("SELECT count(*) FROM pg_proc WHERE proname LIKE 'inbox_%'"))
        assert fn.scalar_one() == 0
    engine.dispose()
