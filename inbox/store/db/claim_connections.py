"""The claims' own connections: out of the engine's pool, kept in autocommit.

A claiming statement is the receiver's one round trip per batch. Through the pool, each
one also paid a checkout and a checkin (with its reset) and two autocommit switches,
about as much client CPU as the statement's own execution for a batch of a few rows
(py-spy of the claiming statement's client side). So the claims keep a few connections of their
own: made by the engine (its connect arguments, timeouts and hooks), detached from its
pool at once, and switched to autocommit for good. A process holds as many as it has
statements out at most (``INBOX_CLAIM_STATEMENTS``, one by default), beside the pool.

A connection that failed in a way that leaves it unusable (closed, broken, inside a
transaction) is closed, and the next statement connects anew, within its deadline; one
that merely had its statement refused (a deadlock victim, a bad row, a cancel) stays.
Connections older than the pool's recycle age are replaced, as the pool's are.

One set per engine (``for_engine``), as the pool is; closed when the engine is collected.
A forked child leaves its parent's connections alone (their sockets are the parent's) and
makes its own.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy import Engine

from inbox.store.db.claims import Claimed, execute_on
from inbox.store.db.engine import DEFAULT_TIMEOUT_S, current_deadline, deadline_at

RECYCLE_S = 1800.0  # make_engine's pool_recycle


class _Held:
    __slots__ = ("born", "driver", "info")

    def __init__(self, driver: psycopg.Connection[Any], info: dict[Any, Any]) -> None:
        self.driver, self.info, self.born = driver, info, time.monotonic()


def _close_all(idle: list[_Held], pid: list[int]) -> None:
    if pid[0] == os.getpid():
        for held in idle:
            held.driver.close()
    idle.clear()


class Connections:
    def __init__(self, engine: Engine, recycle_s: float = RECYCLE_S) -> None:
        self._engine = weakref.ref(engine)  # the engine's entry in ``_shared`` stays weak
        self._recycle_s = recycle_s
        self._idle: list[_Held] = []
        self._pid = [os.getpid()]
        self._lock = threading.Lock()
        self.opened = 0  # connections made, for tests
        weakref.finalize(self, _close_all, self._idle, self._pid)

    def insert(self, rows: list[tuple[Any, ...]], until: float | None = None) -> dict[str, Claimed]:
        """Run the claiming INSERT for ``rows`` on one of these connections, in autocommit;
        the public ids that went in (``inbox.store.db.claims.execute``).

        The driver directly: SQLAlchemy's Connection/Result machinery plus separate BEGIN
        and COMMIT round trips cost much of the receiver's CPU per event. Driver errors
        (psycopg.Error) reach the caller unwrapped; the web maps them to 503."""
        if until is None:
            until = current_deadline(DEFAULT_TIMEOUT_S)
        held = self._take(until)
        try:
            out = execute_on(held.driver, held.info, rows, until)
        except BaseException:
            self._after_failure(held)
            raise
        with self._lock:
            self._idle.append(held)
        return out

    def close(self) -> None:
        with self._lock:
            idle = list(self._idle)
            self._idle.clear()
        for held in idle:
            held.driver.close()

    def _take(self, until: float) -> _Held:
        if self._pid[0] != os.getpid():  # forked: the parent's sockets are not ours
            self._lock = threading.Lock()  # (and a parent's thread may have held it)
            self._idle.clear()
            self._pid[0] = os.getpid()
        stale: list[_Held] = []
        held = None
        with self._lock:
            while self._idle and held is None:
                candidate = self._idle.pop()
                if candidate.driver.closed or time.monotonic() - candidate.born > self._recycle_s:
                    stale.append(candidate)
                else:
                    held = candidate
        for old in stale:
            old.driver.close()
        return held if held is not None else self._open(until)

    def _open(self, until: float) -> _Held:
        engine = self._engine()
        if engine is None:  # pragma: no cover - only for_engine's entry points here
            raise RuntimeError("the engine of these claim connections is gone")
        with deadline_at(until):  # the pool's checkout, and so the connect, by then
            pooled = engine.raw_connection()
        driver = pooled.driver_connection
        assert isinstance(driver, psycopg.Connection)
        info = dict(pooled.info)
        pooled.detach()  # ours now: closed by us, not returned
        try:
            driver.autocommit = True
        except BaseException:
            driver.close()
            raise
        self.opened += 1
        return _Held(driver, info)

    def _after_failure(self, held: _Held) -> None:
        driver = held.driver
        usable = (
            not driver.closed
            and driver.info.status == psycopg.pq.ConnStatus.OK
            and driver.info.transaction_status == TransactionStatus.IDLE
        )
        if usable:
            with self._lock:
                self._idle.append(held)
        else:
            driver.close()


_shared: weakref.WeakKeyDictionary[Engine, Connections] = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


def for_engine(engine: Engine) -> Connections:
    """The claim connections of ``engine`` (made on first use)."""
    with _shared_lock:
        found = _shared.get(engine)
        if found is None:
            found = _shared[engine] = Connections(engine)
        return found
