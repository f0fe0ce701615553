"""Behind PgBouncer in transaction mode (``INBOX_DB_POOLER=transaction``).

A stock PgBouncer (Debian's 1.18: no prepared-statement support, ``options`` refused at
start-up) gives each transaction whichever server session is free. So the engine sends no
startup options, prepares nothing on the server, and sets its timeouts in every
transaction, where they still cut a slow statement or a long lock wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from dev.pgbouncer import PgBouncer
from inbox.infra.config import Settings
from inbox.store.db.engine import alone, make_engine
from inbox.store.write import queue
from tests.helpers import body_of, hmac_headers

SECRET = "s3cret"


def _pooled(pgbouncer: PgBouncer, database_url: str, **kw: object) -> Settings:
    return Settings(
        database_url=pgbouncer.url(database_url),
        db_pooler="transaction",
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def pooled(pgbouncer: PgBouncer, database_url: str) -> Iterator[Engine]:
    eng = make_engine(_pooled(pgbouncer, database_url, db_timeout_ms=400, pool_size=6))
    yield eng
    eng.dispose()


def test_a_stock_pgbouncer_refuses_the_direct_engines_options(pgbouncer, database_url):
    """Why the setting exists: without it, every connection is refused."""
    eng = make_engine(Settings(database_url=pgbouncer.url(database_url)))
    try:
        with pytest.raises(OperationalError, match="unsupported startup parameter: options"):
            with eng.connect() as conn:
                conn.execute(text("SELECT 1"))
    finally:
        eng.dispose()


def test_an_unknown_pooler_mode_is_refused_in_one_line(database_url):
    with pytest.raises(RuntimeError, match="INBOX_DB_POOLER='session'"):
        make_engine(Settings(database_url=database_url, db_pooler="session"))


def test_every_transaction_runs_under_the_timeouts(pooled):
    with pooled.begin() as conn:
        got = conn.execute(
            text("SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),"
                 " current_setting('jit')")
        ).one()  # fmt: skip
    assert tuple(got) == ("400ms", "400ms", "off")


def test_a_slow_statement_is_cut_off_through_pgbouncer(pooled):
    started = time.monotonic()
    with pytest.raises(OperationalError) as caught:
        with pooled.begin() as conn:  # no deadline: the server's timeout alone
            conn.execute(text("SELECT pg_sleep(5)"))
    assert isinstance(caught.value.orig, psycopg.errors.QueryCanceled)
    assert "statement timeout" in str(caught.value.orig)
    assert time.monotonic() - started < 3


def test_an_autocommit_statement_is_cut_off_too(pooled):
    """The claims' own connections run one statement at a time in autocommit: the timeouts
    go first in the same implicit transaction."""
    raw = pooled.raw_connection()
    try:
        driver = raw.driver_connection
        assert isinstance(driver, psycopg.Connection)
        driver.autocommit = True
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            alone(driver, raw.info, lambda: driver.execute("SELECT pg_sleep(5)").fetchall())
        assert time.monotonic() - started < 3
        # ...and the setting ended with its statement: nothing is left on the session.
        assert alone(driver, raw.info, lambda: driver.execute("SELECT 1").fetchall()) == [(1,)]
    finally:
        raw.close()


def test_a_lock_wait_is_cut_off_through_pgbouncer(pooled, engine, make_source):
    src = make_source()
    started = time.monotonic()
    with engine.connect() as holder, holder.begin():  # a direct session holds the row
        holder.execute(text("SELECT * FROM sources WHERE id = :i FOR UPDATE"), {"i": src.id})
        with pytest.raises(OperationalError) as caught:
            with pooled.begin() as conn:
                conn.execute(text("UPDATE sources SET name = name WHERE id = :i"), {"i": src.id})
    assert time.monotonic() - started < 3
    # lock_timeout and statement_timeout are equal: either one cuts the wait
    assert isinstance(
        caught.value.orig, psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled
    )


def test_no_statement_is_prepared_on_a_server_session(pgbouncer, database_url, pg_server_url):
    """A pooler of its own with one server session for many clients, each running one
    statement many times: a client that prepared its statement would meet another's name
    there (or miss its own). (``pgbouncer``: skipped where it is not installed.)"""
    bouncer = PgBouncer(pg_server_url, pool_size=1)
    eng = make_engine(_pooled(bouncer, database_url, pool_size=4, db_timeout_ms=5000))
    failures: list[BaseException] = []

    def run() -> None:
        try:
            for n in range(20):
                with eng.begin() as conn:
                    assert conn.execute(text("SELECT :n + 1"), {"n": n}).scalar() == n + 1
        except BaseException as exc:
            failures.append(exc)

    try:
        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        with eng.connect() as conn:
            prepared = conn.execute(text("SELECT count(*) FROM pg_prepared_statements")).scalar()
    finally:
        eng.dispose()
        bouncer.stop()
    assert failures == []
    assert prepared == 0


@pytest.fixture
def pooled_client(pooled):
    from web import create_app

    settings = Settings(database_url=str(pooled.url), db_pooler="transaction")
    app = create_app(settings, engine=pooled, doorbell=lambda: None, route_cache_seconds=0)
    return app.test_client()


def _post(client, src, payload, key):
    body = body_of(payload)
    return client.post(src.path, data=body, headers=hmac_headers(SECRET, body, key))


def test_the_ingest_contract_through_pgbouncer(pooled_client, make_source, engine):
    src = make_source()
    first = _post(pooled_client, src, {"amount": 5}, "k-1")
    assert first.status_code == 202 and first.json["status"] == "accepted"
    for _ in range(7):  # past psycopg's prepare threshold
        again = _post(pooled_client, src, {"amount": 5}, "k-1")
        assert again.status_code == 202 and again.data == first.data
        assert again.headers["Idempotent-Replayed"] == "true"
    other = _post(pooled_client, src, {"amount": 6}, "k-1")
    assert other.status_code == 422
    for n in range(7):
        assert _post(pooled_client, src, {"n": n}, f"k-{n + 2}").status_code == 202
    with engine.connect() as conn:
        events = conn.execute(text("SELECT count(*) FROM events")).scalar()
        dups = conn.execute(text("SELECT sum(duplicate_count) FROM event_keys")).scalar()
    assert events == 8 and dups == 7


def test_the_day_bounded_claims_still_lock_only_open_days(pooled, engine, make_source, made_days):
    """No prepared statements at all: every plan is made for the days in its text."""
    from tests.integration.test_day_bounds import _locked_days, _old_days, _open_days, _waiting

    src = make_source()
    old = _old_days(engine, made_days, src, n=4)
    for n in range(7):  # past psycopg's prepare threshold, were it on
        event_id = _waiting(engine, src, 900 + n)
        with pooled.connect() as conn, conn.begin():
            claims = queue.claim(conn, "w", 10, 30)
            assert [c.id for c in claims] == [event_id]
            queue.complete(conn, claims[0], "ok", {}, None, None)
            locked = _locked_days(conn)
        assert locked["events"] <= _open_days(engine), locked
        assert not any(d in old for days in locked.values() for d in days)
