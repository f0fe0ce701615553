"""Engines: one per process, built from DATABASE_URL; and a deadline on every wait.

A request that needs the database has one deadline (``deadline``), and every wait of it
is bounded by what is left: the pool's checkout (``_DeadlinePool``), each statement
(``watchdog``) and, in ``inbox.store.db.claims``, the group-commit queue. The server's own
``statement_timeout`` and ``lock_timeout`` cut a slow statement on a live server; they
do nothing when the server has stopped answering (a frozen host, a stalled disk, a
network partition: the kernel still acknowledges every packet, so TCP keepalives and
``tcp_user_timeout`` stay quiet too). The watchdog is the client-side deadline for that
case: it asks the server to cancel the statement, and if that gets no answer either, it
shuts the connection's socket, so the waiting thread gets an error at once and the pool
drops the connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote

import psycopg
import sqlalchemy
from sqlalchemy import Engine, event
from sqlalchemy.pool import PoolProxiedConnection, QueuePool

from inbox.infra import config
from inbox.infra.config import Settings

_DEADLINE: ContextVar[float | None] = ContextVar("inbox_db_deadline", default=None)
TIMEOUT_INFO = "inbox_timeout_s"  # a pooled connection's info: its engine's timeout
DEFAULT_TIMEOUT_S = 2.0  # the settings' default, for a connection not made by make_engine
T = TypeVar("T")


class _Deadline:
    """``deadline_at``'s context manager: a class, as a request enters a few of them and a
    generator-based one costs several times as much to enter and leave."""

    __slots__ = ("_token", "until")

    def __init__(self, until: float) -> None:
        self.until = until

    def __enter__(self) -> float:
        self._token = _DEADLINE.set(self.until)
        return self.until

    def __exit__(self, *exc: object) -> None:
        _DEADLINE.reset(self._token)


def deadline_at(until: float) -> _Deadline:
    """Every database wait inside ends by ``until`` (a time.monotonic() value)."""
    return _Deadline(until)


def deadline(seconds: float) -> contextlib.AbstractContextManager[float]:
    """Every database wait inside ends by ``seconds`` from now."""
    return deadline_at(time.monotonic() + seconds)


def current_deadline(default_seconds: float) -> float:
    """The deadline of the work in progress, or ``default_seconds`` from now."""
    until = _DEADLINE.get()
    return time.monotonic() + default_seconds if until is None else until


class _DeadlinePool(QueuePool):
    """A QueuePool whose checkout waits at most until the caller's deadline, through
    SQLAlchemy's public pool API: ``connect`` (where ``Engine.connect`` and
    ``raw_connection`` check out), ``checkedout``, ``size`` and ``timeout``.

    The pool takes one timeout for every checkout (``pool_timeout``, the engine's database
    timeout), and no per-checkout one. A checkout only waits when every connection is out
    (``make_engine`` allows no overflow), so only then, and only when the deadline ends
    before the pool's own timeout would, does the checkout run in a thread of its own
    (``_by_deadline``): the caller stops waiting at its deadline with the pool's
    TimeoutError, and a connection the thread gets later goes straight back to the pool.
    Chosen over a semaphore beside the pool, which would have to count checkouts,
    checkins, detaches and invalidations exactly as the pool does, and over a thread per
    checkout, which the common case (a free connection) does not need. Such a thread lives
    at most the pool's timeout. A checkout that saw a free connection another thread took
    first waits the pool's timeout at most, as every checkout did before deadlines.
    """

    def connect(self) -> PoolProxiedConnection:
        until = _DEADLINE.get()
        if until is None or self.checkedout() < self.size():
            return super().connect()
        if until - time.monotonic() >= self.timeout():  # the pool's own wait ends first
            return super().connect()
        return _by_deadline(until, super().connect, _checkout_timeout)


def _checkout_timeout() -> BaseException:
    # The error the pool raises at its own timeout, so callers wrap both alike.
    return sqlalchemy.exc.TimeoutError(  # noqa: TID251
        "no pooled connection free within the deadline"
    )


# SQLAlchemy names a pool's logger after its class: keep this one as quiet as its own.
logging.getLogger(f"{__name__}.{_DeadlinePool.__name__}").setLevel(logging.WARNING)


class _Guard:
    __slots__ = ("driver", "lock", "returned", "until")

    def __init__(self, driver: psycopg.Connection[Any], until: float) -> None:
        self.driver = driver
        self.until = until
        # Set by the statement's own thread the moment it returns, without a lock: a cut in
        # progress holds ``lock`` and must still see the return while it waits.
        self.returned = threading.Event()
        self.lock = threading.Lock()


class Watchdog:
    """Cuts statements that run past their deadline (one thread per process).

    The thread looks at the statements in flight ten times a second: a dict insert and a
    dict pop per statement is all the hot path pays. An overdue statement is handed to a
    short-lived thread (a rare event), which asks the server to cancel it and, if the
    server does not answer within ``grace`` seconds, shuts the socket.
    """

    def __init__(self, tick: float = 0.1, grace: float = 0.3) -> None:
        self._tick = tick
        self._grace = grace
        self._mutex = threading.Lock()
        self._out: dict[int, _Guard] = {}
        self._pid = 0  # the process whose thread runs: a forked child starts its own

    def watch(self, driver: psycopg.Connection[Any], until: float) -> _Guard:
        """A statement on ``driver`` that must be over by ``until`` is starting."""
        g = _Guard(driver, until)
        with self._mutex:
            if self._pid != os.getpid():
                self._start()
            self._out[id(g)] = g
        return g

    def done(self, g: _Guard) -> None:
        """The statement returned (or failed)."""
        with self._mutex:
            self._out.pop(id(g), None)
        g.returned.set()
        with g.lock:  # wait for a cut in progress: the connection is ours again after
            pass

    @contextlib.contextmanager
    def guard(self, driver: psycopg.Connection[Any], until: float) -> Iterator[None]:
        g = self.watch(driver, until)
        try:
            yield
        finally:
            self.done(g)

    def _start(self) -> None:
        self._pid = os.getpid()
        self._out.clear()
        threading.Thread(target=self._watch, name="inbox-db-watchdog", daemon=True).start()

    def _watch(self) -> None:
        while True:
            time.sleep(self._tick)
            now = time.monotonic()
            with self._mutex:
                overdue = [g for g in self._out.values() if g.until <= now]
                for g in overdue:
                    del self._out[id(g)]
            for g in overdue:
                threading.Thread(target=self._cut, args=(g,), daemon=True).start()

    def _cut(self, g: _Guard) -> None:
        with g.lock:
            if g.returned.is_set():
                return
            try:
                g.driver.cancel_safe(timeout=self._grace)
            except Exception:  # the server does not answer: nothing will come back
                pass
            else:
                # A live server answers the cancel at once: the statement returns with
                # QueryCanceled and its connection stays good for the next user.
                if g.returned.wait(self._grace):
                    return
            _shut(g.driver)


def _shut(driver: psycopg.Connection[Any]) -> None:
    """Shut the connection's socket: a thread blocked on it reads end-of-file at once."""
    try:
        fd = os.dup(driver.fileno())
    except (OSError, psycopg.Error):
        return
    with socket.socket(fileno=fd) as sock:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


watchdog = Watchdog()


def _connect_timeout() -> BaseException:
    return psycopg.errors.ConnectionTimeout("no connection within the deadline")


def _connect_by(until: float, connect: Any) -> Any:
    """A new connection, or ConnectionTimeout at ``until``.

    libpq's ``connect_timeout`` is whole seconds and psycopg waits at least 2 s, longer
    than a request may have left; so the connect runs in a thread of its own (connects
    are rare: the pool keeps its connections) and the caller stops waiting at its
    deadline. A connection that arrives later is closed.
    """
    return _by_deadline(until, connect, _connect_timeout)


def _by_deadline(until: float, get: Callable[[], T], timeout: Callable[[], BaseException]) -> T:
    """``get()`` run in a thread of its own, its result handed over if it comes by
    ``until``; else ``timeout()`` is raised, and a result that arrives later is closed
    (a driver connection is closed, a pooled one goes back to its pool)."""
    done = threading.Event()
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(get())
        except BaseException as exc:  # handed to the caller, or dropped if it left
            box.append(exc)
        with late:
            done.set()
            if abandoned and box and not isinstance(box[0], BaseException):
                box[0].close()

    late = threading.Lock()
    abandoned = False
    threading.Thread(target=run, name="inbox-db-connect", daemon=True).start()
    done.wait(max(0.0, until - time.monotonic()))
    with late:
        if not done.is_set():
            abandoned = True
            raise timeout()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]  # type: ignore[no-any-return]


_SCHEMES = ("postgresql+psycopg://", "postgresql://", "postgres://")


def sqlalchemy_url(url: str | None = None) -> str:
    """DATABASE_URL in the form SQLAlchemy wants, with the psycopg 3 driver.

    Every libpq URI is accepted, multi-host ones included: a host list in the netloc
    (``postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write``, which
    SQLAlchemy's URL parser refuses) becomes the same list in the query
    (``postgresql+psycopg://u@/db?host=h1,h2&port=5432,5433&target_session_attrs=read-write``),
    the form SQLAlchemy hands on to libpq; a list already in the query is kept as it is.
    libpq then tries the hosts in order and keeps the first that ``target_session_attrs``
    accepts.
    """
    url = url or config.settings().database_url
    if not url:
        raise RuntimeError("DATABASE_URL is not set (run through `make run` or `make test`).")
    prefix = next((p for p in _SCHEMES if url.startswith(p)), None)
    if prefix is None:
        return url
    rest = url[len(prefix) :]
    main, qmark, query = rest.partition("?")
    netloc, slash, path = main.partition("/")
    userinfo, at, hostlist = netloc.rpartition("@")
    if "," in hostlist:
        hosts, ports = zip(*(_host_port(item) for item in hostlist.split(",")), strict=True)
        given = {k for k, _ in parse_qsl(query, keep_blank_values=True)}
        if given & {"host", "hostaddr", "port"}:
            raise ValueError(
                "DATABASE_URL names its hosts twice (in the address and in the query): "
                "keep one list"
            )
        listed = f"host={','.join(hosts)}"
        if any(ports):
            listed += f"&port={','.join(ports)}"
        query = listed + ("&" + query if query else "")
        qmark, netloc = "?", userinfo + at
    return f"postgresql+psycopg://{netloc}{slash or '/'}{path}{qmark}{query}"


def _host_port(item: str) -> tuple[str, str]:
    """``h``, ``h:p``, ``[v6]`` or ``[v6]:p`` of a libpq host list; the port may be empty."""
    if item.startswith("["):
        host, _, after = item[1:].partition("]")
        port = after[1:] if after.startswith(":") else after
    else:
        host, _, port = item.partition(":")
    if port and not port.isdigit():
        raise ValueError(f"DATABASE_URL: the port of {unquote(host)!r} is not a number")
    return quote(unquote(host), safe=":"), port


POOLERS = ("", "transaction")  # INBOX_DB_POOLER's values
# A pooled connection's info: behind a transaction pooler, the statement that sets this
# engine's timeouts for one transaction (``per_transaction``); absent on a direct one.
PER_TRANSACTION_INFO = "inbox_per_transaction"


def session_settings(settings: Settings) -> dict[str, str]:
    """What every transaction runs under: the server cuts a statement or a lock wait at
    the database timeout, and JIT stays off (compiling the claim's plan costs more than
    running it)."""
    ms = str(settings.db_timeout_ms)
    return {"statement_timeout": ms, "lock_timeout": ms, "jit": "off"}


def per_transaction(settings: Settings) -> str:
    """``session_settings`` as one statement local to its transaction (``set_config``'s
    ``is_local``: SET LOCAL), for a pooler that gives each transaction any server session."""
    values = session_settings(settings).items()
    sets = ", ".join(f"set_config('{k}', '{v}', true)" for k, v in values)
    return f"SELECT {sets}"


def alone(driver: psycopg.Connection[Any], info: dict[Any, Any], run: Callable[[], T]) -> T:
    """``run()``, one statement on ``driver`` in autocommit. Behind a transaction pooler the
    session has none of the engine's timeouts, so the statement that sets them goes first
    in one pipeline: the two share one implicit transaction (PostgreSQL's, up to the Sync
    that ``run``'s fetch sends) and one round trip."""
    prelude = info.get(PER_TRANSACTION_INFO)
    if prelude is None:
        return run()
    with driver.pipeline():
        driver.execute(prelude)
        return run()


def make_engine(settings: Settings, pool_size: int | None = None) -> Engine:
    """An engine whose checkouts, connects and statements give up by the deadline, so
    callers can answer 503.

    ``settings.db_pooler == "transaction"`` (PgBouncer in transaction mode, which refuses
    the ``options`` startup parameter and gives each transaction whichever server session
    is free): no startup options and no server-side prepared statements; the timeouts are
    set at the start of every transaction instead (the ``begin`` event), and of every
    autocommit statement (``alone``)."""
    if settings.db_pooler not in POOLERS:
        raise RuntimeError(
            f"INBOX_DB_POOLER={settings.db_pooler!r}: use 'transaction' (PgBouncer in"
            " transaction mode) or leave it empty (a direct connection)"
        )
    pooled = settings.db_pooler == "transaction"
    timeout_s = settings.db_timeout_ms / 1000
    connect_args: dict[str, Any] = {
        # whole seconds; psycopg waits at least 2 s for a connection
        "connect_timeout": max(2, round(timeout_s)),
        "application_name": "webhook-inbox",
    }
    if pooled:
        # psycopg prepares a statement after a few executions, by a name that a pooler's
        # next transaction may find on another session (or taken there).
        connect_args["prepare_threshold"] = None
    else:
        connect_args["options"] = " ".join(
            f"-c {k}={v}" for k, v in session_settings(settings).items()
        )
    engine = sqlalchemy.create_engine(  # by name: the tracing instrumentation wraps it
        sqlalchemy_url(settings.database_url),
        poolclass=_DeadlinePool,
        pool_size=pool_size or settings.pool_size,
        max_overflow=0,
        pool_timeout=timeout_s,
        pool_pre_ping=False,
        # The most recently used connection first: the receiver's claims keep landing on one
        # warm backend with their statements already prepared (less PostgreSQL CPU per
        # event than the default FIFO order).
        pool_use_lifo=True,
        pool_recycle=1800,
        connect_args=connect_args,
    )
    _guard_statements(engine)
    prelude = per_transaction(settings) if pooled else None

    @event.listens_for(engine, "connect")
    def _connected(dbapi_conn: Any, record: Any) -> None:
        record.info[TIMEOUT_INFO] = timeout_s
        if prelude is not None:
            record.info[PER_TRANSACTION_INFO] = prelude

    if prelude is not None:

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            conn.exec_driver_sql(prelude)

    @event.listens_for(engine, "do_connect")
    def _connect(dialect: Any, record: Any, cargs: Any, cparams: Any) -> Any:
        until = _DEADLINE.get()
        if until is None:
            return None  # SQLAlchemy connects as usual, within connect_timeout
        return _connect_by(until, lambda: dialect.connect(*cargs, **cparams))

    return engine


def _guard_statements(engine: Engine) -> None:
    """A statement sent inside a ``deadline`` is watched until it returns. Others (the
    workers, retention, the CLI) keep the server's ``statement_timeout`` alone, which a
    transaction may raise for a long statement of its own."""
    out: dict[int, _Guard] = {}

    @event.listens_for(engine, "before_cursor_execute")
    def _before(conn: Any, cursor: Any, *args: Any) -> None:
        until = _DEADLINE.get()
        if until is not None:
            out[id(cursor)] = watchdog.watch(cursor.connection, until)

    @event.listens_for(engine, "after_cursor_execute")
    def _after(conn: Any, cursor: Any, *args: Any) -> None:
        g = out.pop(id(cursor), None)
        if g is not None:
            watchdog.done(g)

    @event.listens_for(engine, "handle_error")
    def _failed(ctx: Any) -> None:
        # SQLAlchemy 2.1 leaves ExceptionContext.cursor unset; the execution context
        # still holds the cursor. A statement never marked done is cut later, on a
        # connection already back in the pool (the next request's 503).
        cursor = getattr(ctx, "cursor", None) or getattr(ctx.execution_context, "cursor", None)
        g = out.pop(id(cursor), None)
        if g is not None:
            watchdog.done(g)
