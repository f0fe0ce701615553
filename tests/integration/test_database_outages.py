"""A database outage as workers and ``/readyz`` see it, against real PostgreSQL.

The Celery tasks run in this process (a task called directly runs its body); their
engine is pointed at a closed port, or its connection is terminated by the server, as a
failover does. ``/readyz`` is asked about a database that answers but refuses writes: a
read-only session, and a private server put into recovery (a standby), then promoted.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Engine, text

from dev.embedded import PrivatePostgres, free_port
from inbox.domain.callbacks import CallbackSet
from inbox.infra.config import Settings
from inbox.services import sweep
from inbox.services.courier import BUSY_AGAIN
from inbox.services.outages import Outages
from inbox.store.db.engine import make_engine
from inbox.store.schema import migrate
from web import create_app


@pytest.fixture
def tasks(settings: Settings) -> Iterator[object]:
    from workers import state, tasks
    from workers.app import app

    state.use(state.WorkerState(settings, app, outages=Outages()))
    yield tasks
    state.use(None)


def worker() -> object:
    from workers import state

    return state.current()


def counted() -> float:
    return REGISTRY.get_sample_value("inbox_database_outages_total") or 0.0


def lines(caplog) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]


def test_tasks_in_an_outage_log_one_warning_and_resume_after_it(
    tasks, monkeypatch, engine: Engine, caplog
):
    caplog.set_level(logging.INFO)
    dead = make_engine(
        Settings(database_url=f"postgresql://postgres@127.0.0.1:{free_port()}/x", db_timeout_ms=500)
    )
    before = counted()
    monkeypatch.setattr(worker(), "engine_", dead)
    try:
        for _ in range(3):  # every kind of task, several times: one outage
            assert tasks.sweep() is None
            assert tasks.deliver(1) is None
            assert tasks.make_partitions() is None
        seen = lines(caplog)
        assert [level for level, _ in seen] == ["WARNING"], seen
        assert seen[0][1].startswith("database unavailable: OperationalError: connection")
        assert seen[0][1].endswith("; retrying")
        assert counted() - before == 1

        monkeypatch.setattr(worker(), "engine_", engine)  # the database is back
        swept = {"requeued": 0, "quarantined": 0, "due": 0, "released": 0, "unparked": 0}
        assert tasks.sweep() == swept
        assert lines(caplog)[-1][1].startswith("database available again after ")

        monkeypatch.setattr(worker(), "engine_", dead)  # a second outage is a second line
        assert tasks.sweep() is None
        assert [level for level, _ in lines(caplog)] == ["WARNING", "INFO", "WARNING"]
        assert counted() - before == 2
    finally:
        dead.dispose()
    assert not any(r.exc_info for r in caplog.records)  # not one traceback


def test_a_connection_the_server_terminated_is_an_outage_not_a_traceback(
    tasks, monkeypatch, database_url, engine: Engine, caplog
):
    caplog.set_level(logging.INFO)
    own = make_engine(Settings(database_url=database_url), pool_size=1)
    monkeypatch.setattr(worker(), "engine_", own)
    try:
        assert tasks.sweep() is not None  # the pool now holds one live connection
        with own.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with engine.connect() as conn:  # what a primary's shutdown does to every session
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        assert tasks.sweep() is None
        (warning,) = [m for level, m in lines(caplog) if level == "WARNING"]
        assert warning.startswith("database unavailable: ")
        assert tasks.sweep() is not None  # a new connection: the outage is over
        assert lines(caplog)[-1][1].startswith("database available again")
    finally:
        own.dispose()
    assert not any(r.exc_info for r in caplog.records)


def test_an_error_that_is_not_an_outage_still_fails_the_task(tasks, monkeypatch, engine):
    def broken(db: object) -> object:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(worker(), "engine_", engine)
    monkeypatch.setattr(sweep, "sweep_once", broken)
    with pytest.raises(ZeroDivisionError):
        tasks.sweep()


def test_a_courier_that_finds_its_endpoint_locked_rings_again_without_a_traceback(
    tasks, monkeypatch, settings: Settings, engine: Engine, make_source, caplog
):
    """A claim that finds the endpoint row another transaction holds (16 courier threads
    on one endpoint) does not wait for it, even with a database timeout far shorter than
    the hold: the task looks again twice, then rings a moment later, with no log line and
    no traceback; the delivery stays due, nothing is sent twice."""
    from inbox.domain.callbacks import Outgoing
    from inbox.store.write import endpoints as estore
    from inbox.store.write import intents

    caplog.set_level(logging.INFO)
    src = make_source()
    with engine.begin() as conn:
        ep = estore.create_endpoint(conn, src.tenant, "https://example.test/cb", "whsec_x")
        message = Outgoing("busy.test", {"n": 1}, datetime.now(UTC))
        intents.enqueue(
            conn, [CallbackSet(src.tenant_id, src.tenant, None, "evt_busy", "s", [message])]
        )
    quick = make_engine(
        Settings(database_url=settings.database_url, db_timeout_ms=300, pool_size=2)
    )
    rings: list[tuple[str, list[int], list[float]]] = []
    monkeypatch.setattr(tasks, "set_alarms", lambda *a: rings.append(a))
    monkeypatch.setattr(worker(), "engine_", quick)
    holder = psycopg.connect(settings.database_url)
    try:
        holder.execute("SELECT 1 FROM endpoints WHERE id = %s FOR UPDATE", (ep.id,))
        done = tasks.deliver(ep.id)
    finally:
        holder.rollback()
        holder.close()
        quick.dispose()
    assert (done["busy"], done["claimed"]) == (1 + tasks.BUSY_TRIES, 0)
    assert lines(caplog) == []
    assert not any(r.exc_info for r in caplog.records)
    assert rings == [("inbox.deliver", [ep.id], [BUSY_AGAIN])]
    with engine.connect() as conn:
        states = conn.execute(text("SELECT state, attempts FROM deliveries")).all()
    assert [tuple(r) for r in states] == [("pending", 0)]


def test_a_courier_round_cut_at_the_database_timeout_rings_again_with_one_warning(
    tasks, monkeypatch, settings: Settings, engine: Engine, caplog
):
    """A round whose statement passes the database timeout (a record waiting for the
    endpoint's row on a loaded machine) is one WARNING and a ring a moment later."""
    caplog.set_level(logging.INFO)
    quick = make_engine(Settings(database_url=settings.database_url, db_timeout_ms=100))

    def slow(*args: object, **kwargs: object) -> object:
        with quick.begin() as conn:
            return conn.execute(text("SELECT pg_sleep(2)"))

    rings: list[tuple[str, list[int], list[float]]] = []
    monkeypatch.setattr(tasks, "set_alarms", lambda *a: rings.append(a))
    monkeypatch.setattr(worker(), "engine_", engine)
    monkeypatch.setattr(tasks, "deliver_once", slow)
    try:
        assert tasks.deliver(7) == {}
    finally:
        quick.dispose()
    seen = lines(caplog)
    assert len(seen) == 1 and seen[0][0] == "WARNING", seen
    assert seen[0][1].startswith("endpoint 7 busy (")
    assert not any(r.exc_info for r in caplog.records)
    assert rings == [("inbox.deliver", [7], [tasks.BUSY_RETRY_SECONDS])]


def test_a_courier_error_that_is_not_a_timeout_still_fails_the_task(
    tasks, monkeypatch, engine: Engine
):
    def broken(*args: object, **kwargs: object) -> object:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(worker(), "engine_", engine)
    monkeypatch.setattr(tasks, "deliver_once", broken)
    with pytest.raises(ZeroDivisionError):
        tasks.deliver(1)


@pytest.fixture
def read_only_db(pg_server_url: str) -> Iterator[str]:
    """A migrated database of its own whose sessions are read-only once ``read_only``."""
    name = f"inbox_ro_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = pg_server_url.partition("?")
    url = base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")
    migrate.upgrade(url)
    yield url
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _readyz(url: str) -> tuple[int, dict]:
    engine = make_engine(Settings(database_url=url))  # new sessions: they see the setting
    try:
        resp = create_app(Settings(database_url=url), engine=engine, doorbell=lambda: None)
        answer = resp.test_client().get("/readyz")
        return answer.status_code, answer.json
    finally:
        engine.dispose()


def test_readyz_is_503_while_the_database_is_read_only(pg_server_url, read_only_db):
    name = read_only_db.rsplit("/", 1)[1].partition("?")[0]
    assert _readyz(read_only_db)[0] == 200
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    status, body = _readyz(read_only_db)
    assert status == 503 and body["cause"] == "database", body
    assert body["checks"]["database"] == "read-only: transaction_read_only is on"
    # Through libpq's read-write check, as a multi-host URL asks: refused at connect.
    status, body = _readyz(read_only_db + "?target_session_attrs=read-write")
    assert status == 503 and body["cause"] == "database", body
    assert body["checks"]["database"] == "read-only: no host of DATABASE_URL accepts writes"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
    status, body = _readyz(read_only_db)
    assert status == 200 and body["checks"]["database"] == "ok", body


def test_readyz_names_an_unreachable_database():
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/none"
    status, body = _readyz(url)
    assert status == 503 and body["cause"] == "database"
    assert body["checks"]["database"] == "unreachable: OperationalError"


def test_readyz_names_the_servers_reason_for_a_database_that_does_not_exist(pg_server_url):
    """A misspelled database name is not an outage to wait out: /readyz says what the
    server said (no address), not a bare error class."""
    url = pg_server_url.rsplit("/", 1)[0] + "/inbox_no_such_database"
    status, body = _readyz(url)
    assert status == 503 and body["cause"] == "database"
    said = body["checks"]["database"]
    assert said == 'refused: database "inbox_no_such_database" does not exist', said


def test_readyz_is_503_while_the_server_is_a_standby_and_ok_once_promoted():
    """A private PostgreSQL put into recovery (standby.signal), as a demoted primary is."""
    try:
        cluster = PrivatePostgres(settings={"fsync": "off"})
    except RuntimeError as exc:
        pytest.skip(str(exc))
    try:
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE inbox")
        url = cluster.url.rsplit("/", 1)[0] + "/inbox"
        migrate.upgrade(url)
        assert _readyz(url)[0] == 200

        data = str(cluster.data)
        cluster.as_postgres("pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
        cluster.as_postgres("touch", str(cluster.data / "standby.signal"))
        cluster.start()
        status, body = _readyz(url)
        assert status == 503 and body["cause"] == "database", body
        assert body["checks"]["database"] == "read-only: the server is a standby (in recovery)"

        cluster.as_postgres("pg_ctl", "-D", data, "-w", "promote")
        status, body = _readyz(url)
        assert status == 200 and body["checks"]["database"] == "ok", body
    finally:
        cluster.stop()
