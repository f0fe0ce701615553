"""Alembic environment: the URL comes from the caller's connection or DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from inbox.store.db.engine import sqlalchemy_url
from inbox.store.schema.tables import metadata

config = context.config
target_metadata = metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(
        config.get_main_option("sqlalchemy.url") or sqlalchemy_url(),
        # No server-side prepared statements: a run through a transaction pooler (without
        # INBOX_MIGRATE_DATABASE_URL) must not meet another session's names.
        connect_args={"prepare_threshold": None},
    )
    try:
        with engine.connect() as conn:
            context.configure(connection=conn, target_metadata=target_metadata)
            with context.begin_transaction():
                context.run_migrations()
    finally:  # a migration that fails must not leave its connection open
        engine.dispose()


run_migrations_online()
