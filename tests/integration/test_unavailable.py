"""Database down or too slow: 503 with Retry-After, never a 2xx, nothing stored."""

from __future__ import annotations

import threading

from sqlalchemy import text

from inbox.config import Settings
from inbox.store.engine import make_engine
from tests.helpers import body_of, hmac_headers
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


def test_database_too_slow_is_503_and_stores_nothing(settings, make_source, engine):
    src = make_source()
    slow = Settings(database_url=settings.database_url, db_timeout_ms=300)
    slow_engine = make_engine(slow)
    app = create_app(slow, engine=slow_engine, doorbell=lambda: None, route_cache_seconds=60)
    client = app.test_client()
    body = body_of({"a": 1})
    first = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k0"))
    assert first.status_code == 202
    locked, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with engine.begin() as conn:
            conn.execute(text("LOCK TABLE events IN ACCESS EXCLUSIVE MODE"))
            locked.set()
            release.wait(10)

    t = threading.Thread(target=hold_lock)
    t.start()
    locked.wait(5)
    try:
        resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k1"))
    finally:
        release.set()
        t.join()
    assert resp.status_code == 503 and "Retry-After" in resp.headers
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events")).scalar_one() == 1
    # the sender's retry, once the database answers again, is accepted
    retry = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k1"))
    slow_engine.dispose()
    assert retry.status_code == 202
