"""Database down or too slow: 503 with Retry-After, never a 2xx, nothing stored."""

from __future__ import annotations

import threading

from sqlalchemy import text

from inbox.infra.config import Settings
from inbox.store.db.claim_connections import for_engine
from inbox.store.db.engine import make_engine
from tests.helpers import body_of, hmac_headers, wait_for
from web import create_app


def test_database_down_is_503_with_retry_after(settings, make_source, engine):
    src = make_source()
    down = Settings(database_url="postgresql://postgres@127.0.0.1:1/none", db_timeout_ms=500)
    down_engine = make_engine(down)
    app = create_app(down, engine=down_engine, doorbell=lambda: None)
    # the route lookup itself needs the database: still a 503, not a 500
    body = body_of({"a": 1})
    resp = app.test_client().post(src.path, data=body, headers=hmac_headers("s3cret", body, "k"))
    down_engine.dispose()
    assert resp.status_code == 503
    assert resp.headers["Retry-After"] == "5"
    assert resp.json["error"]["code"] == "unavailable"


def _receiver(settings: Settings, src, pool_size: int | None = None):
    """An app on its own engine, which has just accepted one event."""
    eng = make_engine(settings, pool_size=pool_size)
    client = create_app(
        settings, engine=eng, doorbell=lambda: None, route_cache_seconds=60
    ).test_client()
    body = body_of({"a": 1})
    first = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k0"))
    assert first.status_code == 202
    return eng, client, body


def _post_while_events_locked(engine, client, path: str, body: bytes, key: str):
    """POST while another transaction holds an exclusive lock on the events table."""
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        with engine.begin() as conn:
            conn.execute(text("LOCK TABLE events IN ACCESS EXCLUSIVE MODE"))
            locked.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    locked.wait(5)
    try:
        return client.post(path, data=body, headers=hmac_headers("s3cret", body, key))
    finally:
        release.set()
        t.join()


def test_database_too_slow_is_503_and_stores_nothing(settings, make_source, engine):
    src = make_source()
    slow = Settings(database_url=settings.database_url, db_timeout_ms=300)
    slow_engine, client, body = _receiver(slow, src)
    resp = _post_while_events_locked(engine, client, src.path, body, "k1")
    assert resp.status_code == 503 and "Retry-After" in resp.headers
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events")).scalar_one() == 1
    # the sender's retry, once the database answers again, is accepted
    retry = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k1"))
    slow_engine.dispose()
    assert retry.status_code == 202


def test_a_timed_out_claim_returns_its_connection_in_transaction_mode(
    settings, make_source, engine
):
    """The accepted path runs in autocommit on a pooled connection; after a failure the
    connection must go back to the pool as it came, or the next user's transaction
    (the duplicate path, the workers) would silently commit statement by statement."""
    src = make_source()
    slow = Settings(database_url=settings.database_url, db_timeout_ms=300)
    one, client, body = _receiver(slow, src, pool_size=1)
    resp = _post_while_events_locked(engine, client, src.path, body, "k1")
    assert resp.status_code == 503
    with one.connect() as conn:
        assert conn.connection.driver_connection.autocommit is False
    one.dispose()


def test_a_claim_whose_connection_dies_is_503_and_the_next_claim_reconnects(
    settings, make_source, engine
):
    src = make_source()
    one, client, body = _receiver(settings, src, pool_size=1)
    try:
        (held,) = for_engine(one)._idle  # the claims' own connection, made by the first
        pid = held.driver.info.backend_pid
        with engine.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
        # the claims' connection is dead: this claim fails on it, and is never a 2xx
        resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k1"))
        assert resp.status_code == 503 and resp.headers["Retry-After"]
        # the dead connection was dropped: the sender's retry is accepted on a new one
        retry = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k1"))
        assert retry.status_code == 202
        assert for_engine(one).opened == 2
    finally:
        for_engine(one).close()
        one.dispose()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events")).scalar_one() == 2


def test_a_statement_the_watchdog_cancels_leaves_its_connection_usable(settings):
    """A live server answers the watchdog's cancel at once; the statement returns with
    QueryCanceled and the connection goes back to the pool intact. The watchdog shuts the
    socket only when the statement does not return: shutting it after a good cancel hands
    the next request a dead connection, and that request a 503 it did not earn."""
    import psycopg

    from inbox.store.db.engine import deadline

    # the server's own timeouts far away: only the client-side deadline can end the sleep
    patient = Settings(database_url=settings.database_url, db_timeout_ms=30_000)
    one = make_engine(patient, pool_size=1)
    try:
        with one.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with deadline(0.3), one.connect() as conn:
            try:
                conn.execute(text("SELECT pg_sleep(20)"))
            except Exception as exc:
                assert isinstance(getattr(exc, "orig", None), psycopg.errors.QueryCanceled)
            else:
                raise AssertionError("the deadline did not cut the statement")
        # Harm could come only from the watchdog's cut, which runs on a thread of its own:
        # wait until every cut is over, then look.
        wait_for(lambda: not any("(_cut)" in t.name for t in threading.enumerate()))
        with one.connect() as conn:  # the same pooled connection, still alive
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() == pid
    finally:
        one.dispose()
