"""The pool's checkout ends by the request's deadline (``inbox.store.db.engine``): a
request that finds every pooled connection out waits what its deadline leaves, not the
engine's whole timeout; without a deadline, the engine's timeout alone."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from sqlalchemy import text
from sqlalchemy.exc import TimeoutError as PoolTimeout

from inbox.infra.config import Settings
from inbox.store.db.engine import deadline, make_engine
from tests.helpers import wait_for


def test_a_checkout_from_an_exhausted_pool_ends_at_the_deadline(settings: Settings) -> None:
    one = make_engine(replace(settings, db_timeout_ms=5000), pool_size=1)
    try:
        with one.connect():  # the pool's only connection, held
            started = time.monotonic()
            with pytest.raises(PoolTimeout), deadline(0.3):
                one.connect()
            waited = time.monotonic() - started
        assert 0.25 <= waited < 2.5  # the pool alone would have waited 5 s
        # The wait the caller gave up on hands back what it got: the connection serves again.
        with deadline(5), one.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1
        wait_for(lambda: one.pool.checkedout() == 0, 5)
    finally:
        one.dispose()


def test_a_deadline_past_the_pools_timeout_waits_the_pools_timeout(settings: Settings) -> None:
    one = make_engine(replace(settings, db_timeout_ms=300), pool_size=1)
    try:
        with one.connect():
            started = time.monotonic()
            with pytest.raises(PoolTimeout), deadline(30):
                one.connect()
            assert 0.25 <= time.monotonic() - started < 5
            started = time.monotonic()
            with pytest.raises(PoolTimeout):  # no deadline: the engine's timeout
                one.connect()
            assert 0.25 <= time.monotonic() - started < 5
    finally:
        one.dispose()


def test_a_free_connection_is_checked_out_under_a_deadline(settings: Settings) -> None:
    two = make_engine(settings, pool_size=2)
    try:
        with two.connect(), deadline(1), two.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1
    finally:
        two.dispose()
