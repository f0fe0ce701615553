"""Migrations: an empty database upgrades to exactly the table definitions, and back."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from inbox.domain.states import ALLOWED
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


def test_database_guard_allows_exactly_the_transition_table(engine) -> None:
    """The trigger and inbox.states.ALLOWED are the same table."""
    states = ("received", "processing", "completed", "quarantined")
    allowed_in_db = set()
    for a in states:
        for b in states:
            if a == b:
                continue
            with engine.connect() as conn:
                trans = conn.begin()
                try:
                    conn.execute(
                        text(
                            "INSERT INTO tenants (name) VALUES ('g');"
                            "INSERT INTO sources (tenant_id, name, scheme)"
                            " SELECT id, 'g', 'none' FROM tenants;"
                        )
                    )
                    conn.execute(
                        text(
                            "INSERT INTO events (public_id, tenant_id, source_id, content_type,"
                            " body_sha256, response_status, response_body, state)"
                            " SELECT 'e', t.id, s.id, 'application/json', '\\x00', 202, '', :a"
                            " FROM tenants t JOIN sources s ON s.tenant_id = t.id"
                        ),
                        {"a": a},
                    )
                    conn.execute(text("UPDATE events SET state = :b"), {"b": b})
                    allowed_in_db.add((a, b))
                except IntegrityError:
                    pass  # the guard refused this pair
                finally:
                    trans.rollback()
    assert allowed_in_db == {(str(x), str(y)) for x, y in ALLOWED}
