"""Per-source rate limits and the backlog guard: refusals that store nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import event, text

from tests.helpers import body_of, hmac_headers, wait_for
from tests.integration.test_api import quarantine
from web import create_app

SECRET = "s3cret"


def events(engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM events")).scalar_one())


def send(client, src, key: str, secret: str = SECRET):
    body = body_of({"k": key})
    return client.post(src.path, data=body, headers=hmac_headers(secret, body, key))


def test_past_the_rate_limit_is_429_with_retry_after_and_nothing_stored(
    client, make_source, engine
):
    src = make_source(rate_limit_per_second=0.01, rate_limit_burst=2)
    assert [send(client, src, f"k{i}").status_code for i in range(2)] == [202, 202]
    resp = send(client, src, "k2")
    assert resp.status_code == 429 and resp.is_json
    assert resp.json["error"]["code"] == "too_many_requests"
    assert 1 <= int(resp.headers["Retry-After"]) <= 100
    assert events(engine) == 2
    other = make_source()  # another source has its own allowance (none here)
    assert send(client, other, "k0").status_code == 202


def test_strangers_cannot_use_up_a_sources_allowance(client, make_source, engine):
    src = make_source(rate_limit_per_second=0.01, rate_limit_burst=1)
    for i in range(5):
        assert send(client, src, f"x{i}", secret="wrong").status_code == 401
    assert send(client, src, "real").status_code == 202


def test_the_bucket_is_shared_through_redis_by_every_process(
    settings, engine, bell, make_source, redis_url
):
    import redis

    shared = replace(settings, redis_url=redis_url)
    a = create_app(shared, engine=engine, doorbell=bell, route_cache_seconds=0).test_client()
    b = create_app(shared, engine=engine, doorbell=bell, route_cache_seconds=0).test_client()
    src = make_source(rate_limit_per_second=0.01, rate_limit_burst=3)
    redis.Redis.from_url(redis_url).delete(f"inbox:rate:{src.id}")
    got = [send(c, src, f"k{i}").status_code for i, c in enumerate((a, b, a, b, a))]
    assert got == [202, 202, 202, 429, 429]
    assert events(engine) == 3


def test_with_redis_down_the_limit_holds_per_process_and_nothing_is_5xx(
    settings, engine, bell, make_source
):
    from dev.embedded import free_port

    down = replace(settings, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    client = create_app(down, engine=engine, doorbell=bell, route_cache_seconds=0).test_client()
    src = make_source(rate_limit_per_second=0.01, rate_limit_burst=2)
    got = [send(client, src, f"k{i}").status_code for i in range(4)]
    assert got == [202, 202, 429, 429]
    assert events(engine) == 2


@pytest.fixture
def count_queries(engine):
    seen: list[str] = []

    def before(conn, cursor, statement, *args):
        if "WHERE state IN ('received', 'processing') LIMIT" in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", before)
    yield seen
    event.remove(engine, "before_cursor_execute", before)


def test_past_the_backlog_new_events_get_503_and_the_count_is_cached(
    settings, engine, bell, make_source, count_queries
):
    app = create_app(replace(settings, max_backlog=3), engine=engine, doorbell=bell)
    client = app.test_client()
    src = make_source()
    quarantine(engine, src, 4, "evt_wait", state="received")
    for i in range(10):
        resp = send(client, src, f"k{i}")
        assert resp.status_code == 503 and resp.json["error"]["code"] == "backlog_full"
        assert int(resp.headers["Retry-After"]) > 0
    assert events(engine) == 4  # nothing more stored
    assert len(count_queries) <= 2  # cached: not a count per request
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM events"))  # drained (retention, say)
    # The cached count expires in 2 s; until then the receiver still answers 503.
    wait_for(lambda: send(client, src, "after").status_code == 202)
    assert events(engine) == 1


def test_without_a_backlog_limit_nothing_is_counted(client, make_source, count_queries):
    src = make_source()
    assert send(client, src, "k").status_code == 202
    assert count_queries == []
