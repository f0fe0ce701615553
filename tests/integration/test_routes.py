"""The source cache in front of the receiver (inbox/services/routes.py), against real PostgreSQL."""

from __future__ import annotations

import threading

from sqlalchemy import text

from inbox.services.routes import RouteCache
from tests.helpers import Clock, wait_for

TTL = 0.3


def _disable(engine, src) -> None:
    with engine.begin() as conn:
        conn.execute(text("UPDATE sources SET enabled = false WHERE id = :id"), {"id": src.id})


def _lock_waiters(engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_locks"
                    " WHERE NOT granted AND relation = 'sources'::regclass"
                )
            ).scalar_one()
        )


def test_a_change_shows_once_the_entry_has_expired(engine, make_source):
    src = make_source()
    clock = Clock()
    cache = RouteCache(engine, TTL, clock)
    assert cache.get(src.tenant, src.name).enabled
    _disable(engine, src)
    assert cache.get(src.tenant, src.name).enabled  # still cached
    clock.advance(TTL + 0.05)
    assert not cache.get(src.tenant, src.name).enabled  # the refreshing request reads it


def test_while_one_request_refreshes_an_entry_the_others_keep_the_one_they_have(
    engine, make_source
):
    """Only one request reads an expired entry again. The table is locked so that its
    read waits; a second request in that time answers at once from the expired entry,
    where before it would have queued on the same lock (and on a pool connection)."""
    src = make_source()
    clock = Clock()
    cache = RouteCache(engine, TTL, clock)
    assert cache.get(src.tenant, src.name).enabled
    _disable(engine, src)
    clock.advance(TTL + 0.05)
    refreshed: list[object] = []
    with engine.connect() as locker:
        locker.execute(text("LOCK TABLE sources IN ACCESS EXCLUSIVE MODE"))
        refresher = threading.Thread(
            target=lambda: refreshed.append(cache.get(src.tenant, src.name))
        )
        refresher.start()
        wait_for(lambda: _lock_waiters(engine) >= 1)  # the refresher's query waits on the lock
        other = threading.Thread(target=lambda: refreshed.append(cache.get(src.tenant, src.name)))
        other.start()
        other.join(5)
        assert not other.is_alive()  # it did not wait for the lock
        assert refreshed[0].enabled  # it answered from the expired entry
        locker.rollback()  # releases the lock
    refresher.join(10)
    assert not refreshed[1].enabled  # the refresher read the change
    assert not cache.get(src.tenant, src.name).enabled  # and cached it
    assert not cache._refreshing


def test_an_entry_far_past_its_time_is_read_again_by_every_request(engine, make_source):
    """Past twice the ttl nobody answers from the old entry, even while a refresh runs."""
    src = make_source()
    clock = Clock()
    cache = RouteCache(engine, TTL, clock)
    assert cache.get(src.tenant, src.name).enabled
    _disable(engine, src)
    clock.advance(2 * TTL + 0.05)
    cache._refreshing.add((src.tenant, src.name))  # as if a refresh were stuck
    assert not cache.get(src.tenant, src.name).enabled


def test_a_failed_refresh_lets_the_next_request_try_again(engine, make_source):
    src = make_source()
    clock = Clock()
    cache = RouteCache(engine, TTL, clock)
    assert cache.get(src.tenant, src.name).enabled
    clock.advance(TTL + 0.05)
    broken = RouteCache(engine, TTL, clock)
    broken._entries = dict(cache._entries)
    broken._engine = None  # type: ignore[assignment]  # the refresh fails
    try:
        broken.get(src.tenant, src.name)
    except AttributeError:
        pass
    else:
        raise AssertionError("the refresh should have failed")
    assert not broken._refreshing  # released: the next request refreshes
