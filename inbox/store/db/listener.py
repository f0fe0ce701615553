"""One LISTEN connection per web process, shared by every request that waits for a decision.

A request sent with ``Prefer: wait`` waits for its event's decision. When a synchronous
event is completed or quarantined, the transaction that finishes it sends ``NOTIFY
inbox_decided`` with the event's public id (a trigger, migration 0022), which PostgreSQL
delivers once that transaction commits. A ``Listener`` keeps one connection in autocommit
with ``LISTEN inbox_decided`` on a thread of its own, and wakes the requests watching each
event (a small dispatcher: a dict of public ids to ``Watch``es). The waiting requests hold no
connection and send no statement until they are woken.

A wake-up is a hint, never the answer: the woken request reads the stored row, which is
the truth. So a notification may be missed without harm, and a request is also woken
(to read once) whenever the listener begins listening after its claim was sent (a
completion may have committed while nobody listened): at its first LISTEN and after
every reconnect. A notification that arrives for an event nobody watches yet (the request
has not registered) is remembered for a while (``RECENT``).

The connection is checked every ``health_s`` seconds (``SELECT 1``, cut at the database
timeout by the watchdog, so a silently dead socket is found); a failed one is closed and
a new one made, with a backoff, the outage logged once and the recovery once. A forked
child starts its own thread and connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import psycopg
from sqlalchemy import Engine

from inbox.infra.config import Settings
from inbox.store.db.engine import make_engine, watchdog

log = logging.getLogger(__name__)

CHANNEL = "inbox_decided"
RECENT = 4096  # events notified with nobody watching, kept for a request about to watch
HEALTH_S = 5.0  # a quiet connection is checked this often
BACKOFF_S = (0.05, 2.0)  # first and longest wait between connection attempts

# Makes a new connection (autocommit or not: the listener sets it), or raises; None when
# there is nothing left to connect for (the engine was collected): the thread ends.
Connect = Callable[[], "psycopg.Connection[Any] | None"]


class Watch:
    """One request's interest in one event's decision."""

    __slots__ = ("public_id", "woken")

    def __init__(self, public_id: str) -> None:
        self.public_id = public_id
        self.woken = threading.Event()

    def wait(self, until: float) -> bool:
        """True once woken (a NOTIFY for the event, or a read is due after a (re)connect),
        False at ``until``. Clears the wake-up, so the next call waits for another one."""
        woken = self.woken.wait(max(0.0, until - time.monotonic()))
        self.woken.clear()
        return woken


class Listener:
    """The process's LISTEN connection and its dispatcher (thread-safe)."""

    def __init__(
        self, connect: Connect, timeout_s: float = 2.0, health_s: float = HEALTH_S
    ) -> None:
        self._connect = connect
        self._timeout_s = timeout_s
        self._health_s = health_s
        self._lock = threading.Lock()
        self._watches: dict[str, list[Watch]] = {}
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._since: float | None = None  # when the current LISTEN began; None: not listening
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._conn: psycopg.Connection[Any] | None = None
        self.backend_pid: int | None = None  # the listening session's, for tests
        self.connects = 0  # LISTENs begun, for tests

    @contextlib.contextmanager
    def watching(self, public_id: str, since: float) -> Iterator[Watch]:
        """Watch the event ``public_id`` while the block runs. ``since``: when the request's
        claim was sent (``time.monotonic()``); if nobody listened from then on, the watch
        starts woken, so the request reads once."""
        watch = self._watch(public_id, since)
        try:
            yield watch
        finally:
            self._forget(watch)

    def waiting(self) -> int:
        """How many requests are watching, for tests and metrics."""
        with self._lock:
            return sum(len(w) for w in self._watches.values())

    def listening(self) -> bool:
        with self._lock:
            return self._since is not None

    def close(self) -> None:
        """Stop the thread and close the connection."""
        self._stop.set()
        conn = self._conn
        if conn is not None:
            _shut(conn)  # the thread, blocked in a read, wakes at once
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def _watch(self, public_id: str, since: float) -> Watch:
        watch = Watch(public_id)
        with self._lock:
            self._start()
            self._watches.setdefault(public_id, []).append(watch)
            started = self._since
            heard = self._recent.pop(public_id, False) is None  # notified a moment ago
            if heard or (started is not None and started > since):
                watch.woken.set()
        return watch

    def _forget(self, watch: Watch) -> None:
        with self._lock:
            found = self._watches.get(watch.public_id)
            if found is not None:
                with contextlib.suppress(ValueError):
                    found.remove(watch)
                if not found:
                    del self._watches[watch.public_id]

    def _start(self) -> None:
        """(Under the lock.) The thread, once per process."""
        if self._pid != os.getpid():  # forked: the parent's thread and socket are not ours
            self._pid, self._thread, self._conn, self._since = os.getpid(), None, None, None
            self._watches.clear()
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="inbox-listener", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        backoff, lost = BACKOFF_S[0], False
        while not self._stop.is_set():
            try:
                conn = self._connect()
            except Exception as exc:
                lost = _outage(lost, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_S[1])
                continue
            if conn is None:
                return
            self._conn = conn
            try:
                conn.autocommit = True
                conn.execute(f"LISTEN {CHANNEL}")
                self._listening(conn)
                if lost:
                    log.info("listening for decisions again", extra={"outcome": "recovered"})
                lost, backoff = False, BACKOFF_S[0]
                self._serve(conn)
            except Exception as exc:
                if not self._stop.is_set():
                    lost = _outage(lost, exc)
            finally:
                with self._lock:
                    self._since = None
                self._conn = None
                with contextlib.suppress(Exception):
                    conn.close()
            self._stop.wait(backoff)

    def _listening(self, conn: psycopg.Connection[Any]) -> None:
        """LISTEN has begun: every watching request reads once (what committed before it
        was not heard)."""
        with self._lock:
            self._since = time.monotonic()
            self.backend_pid = conn.info.backend_pid
            self.connects += 1
            for watches in self._watches.values():
                for watch in watches:
                    watch.woken.set()

    def _serve(self, conn: psycopg.Connection[Any]) -> None:
        while not self._stop.is_set():
            for notify in conn.notifies(timeout=self._health_s):
                self._dispatch(notify.payload)
            with watchdog.guard(conn, time.monotonic() + self._timeout_s):
                conn.execute("SELECT 1")

    def _dispatch(self, public_id: str) -> None:
        with self._lock:
            watches = self._watches.get(public_id)
            if watches:
                for watch in watches:
                    watch.woken.set()
                return
            self._recent[public_id] = None
            if len(self._recent) > RECENT:
                self._recent.popitem(last=False)


def _outage(already: bool, exc: BaseException) -> bool:
    """Log a lost or refused listening connection, once per outage."""
    if not already:
        log.warning(
            "not listening for decisions (waiting requests read the stored state): %s",
            type(exc).__name__,
            extra={"error_class": type(exc).__name__, "outcome": "unavailable"},
        )
    return True


def _shut(conn: psycopg.Connection[Any]) -> None:
    """Shut the connection's socket: the thread reading it sees end-of-file at once."""
    try:
        fd = os.dup(conn.fileno())
    except (OSError, psycopg.Error):
        return
    with socket.socket(fileno=fd) as sock, contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


_shared: weakref.WeakKeyDictionary[Engine, Listener | None] = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


def for_engine(engine: Engine, settings: Settings) -> Listener | None:
    """The process's listener for ``engine``'s database (made on first use, started on
    the first watch); None where no LISTEN is possible.

    Behind PgBouncer in transaction mode (``INBOX_DB_POOLER=transaction``) a session is
    lent for one transaction at a time, so LISTEN would be heard by nobody: the listener
    then connects to ``INBOX_MIGRATE_DATABASE_URL`` (the direct URL past the pooler) if it
    is set; without one there is no listener (None, said once in the log) and the waiting
    requests poll, a bounded number of times."""
    with _shared_lock:
        if engine in _shared:
            return _shared[engine]
        found: Listener | None
        timeout_s = settings.db_timeout_ms / 1000
        if settings.db_pooler != "transaction":
            found = Listener(_detached(weakref.ref(engine)), timeout_s)
        elif settings.migrate_database_url:
            direct = replace(settings, database_url=settings.migrate_database_url, db_pooler="")
            own = make_engine(direct, pool_size=1)
            found = Listener(_detached(lambda: own), timeout_s)
        else:
            log.info(
                "INBOX_DB_POOLER=transaction and no INBOX_MIGRATE_DATABASE_URL: no LISTEN"
                " past the pooler, so Prefer: wait polls the stored state (set"
                " INBOX_MIGRATE_DATABASE_URL to a direct URL to be woken instead)",
                extra={"outcome": "polling"},
            )
            found = None
        _shared[engine] = found
        return found


def _detached(engine: Callable[[], Engine | None]) -> Connect:
    """Connections made by ``engine`` (its connect arguments, timeouts and hooks), taken
    out of its pool at once: the listener's own, closed by it."""

    def connect() -> psycopg.Connection[Any] | None:
        eng = engine()
        if eng is None:
            return None
        pooled = eng.raw_connection()
        driver = pooled.driver_connection
        assert isinstance(driver, psycopg.Connection)
        pooled.detach()
        return driver

    return connect
