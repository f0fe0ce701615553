"""A courier's round against a real local sink: a claim that finds its endpoint's row held
does not wait for it, two couriers racing on one endpoint deliver each webhook-id once,
a quiet round costs a fixed number of statements, and a courier thread's HTTP client keeps
its connection to a busy endpoint across tasks."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from inbox.domain.errors import NotFound
from inbox.domain.records import EndpointId
from inbox.infra.config import Settings
from inbox.outbound.client import Blocked, PerThread
from inbox.services.courier import BUSY_AGAIN, deliver_once
from inbox.store.db.engine import make_engine
from tests.helpers import wait_for
from tests.integration.test_circuit_breaker import endpoint, enqueue


@pytest.fixture
def tenant(make_source):
    return make_source()


@pytest.fixture
def impatient(settings: Settings) -> Iterator[Engine]:
    """An engine whose every lock wait fails after 100 ms: a courier that queued on the
    endpoint's row behind a slow holder would raise, not deliver."""
    eng = make_engine(settings)

    @event.listens_for(eng, "connect")
    def _impatient(dbapi_conn: Any, record: Any) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute("SET lock_timeout = '100ms'")
        dbapi_conn.commit()

    yield eng
    eng.dispose()


def unfinished(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT count(*) FROM deliveries WHERE state IN ('pending', 'sending')")
        ).scalar_one()


def test_a_held_endpoint_is_skipped_at_once_and_delivered_after(engine, sink, tenant):
    ep = endpoint(engine, tenant, sink.url("/held"))
    ids = enqueue(engine, tenant, 3)
    done: list[Any] = []
    statements: list[str] = []

    def courier() -> None:
        def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
            if threading.current_thread() is t:
                statements.append(statement)

        event.listen(engine, "before_cursor_execute", count)
        try:
            done.append(deliver_once(engine, ep.id, allow_private=True))
        finally:
            event.remove(engine, "before_cursor_execute", count)

    with engine.begin() as holder:  # another courier's claim or record, mid-transaction
        holder.execute(text("SELECT 1 FROM endpoints WHERE id = :e FOR UPDATE"), {"e": ep.id})
        t = threading.Thread(target=courier)
        t.start()
        t.join(timeout=10)  # the lock is held all along: a waiting claim would still wait
        assert done, "the courier waited for the endpoint's row"
    assert len(statements) == 1  # a busy round is one statement
    [busy] = done
    assert (busy.busy, busy.claimed, busy.retry_in) == (1, 0, [BUSY_AGAIN])  # a ring soon
    assert sink.at("/held") == []
    done_now = deliver_once(engine, ep.id, allow_private=True)  # the ring: all of them
    assert done_now.delivered == 3
    assert [r.headers["webhook-id"] for r in sink.at("/held")] == ids


def test_two_couriers_racing_deliver_each_once_and_neither_waits(impatient, sink, tenant):
    engine = impatient
    ep = endpoint(engine, tenant, sink.url("/race"), max_in_flight=2)
    ids = set(enqueue(engine, tenant, 120))
    # The first courier holds the endpoint's row 300 ms per claim (descheduled, as on a
    # loaded machine); the second would wait past its 100 ms lock timeout if it queued.
    opening = "FOR UPDATE OF e"

    # Its first claim holds the row until the second courier has tried once, so the race
    # happens however a loaded machine schedules the two threads.
    holding, tried = threading.Event(), threading.Event()

    @event.listens_for(engine, "after_cursor_execute")
    def _slow(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if opening in statement and threading.current_thread().name == "slow":
            if not holding.is_set():
                holding.set()
                tried.wait(30)  # the row stays locked meanwhile
            conn.exec_driver_sql("SELECT pg_sleep(0.3)")  # the row stays locked meanwhile

    results: dict[str, list[Any]] = {"slow": [], "quick": []}
    errors: list[BaseException] = []

    def courier() -> None:
        name = threading.current_thread().name
        if name == "quick":
            holding.wait(30)
        deadline = time.monotonic() + 60
        try:
            while unfinished(engine) and time.monotonic() < deadline:
                results[name].append(deliver_once(engine, ep.id, allow_private=True))
                tried.set()
        except BaseException as exc:
            errors.append(exc)
        finally:
            tried.set()

    threads = [threading.Thread(target=courier, name=n) for n in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    event.remove(engine, "after_cursor_execute", _slow)
    assert errors == []  # no lock wait ran out
    received = Counter(r.headers["webhook-id"] for r in sink.at("/race"))
    assert set(received) == ids
    assert set(received.values()) == {1}  # every delivery exactly once
    assert sum(r.busy for r in results["quick"]) > 0  # the race happened: it skipped
    assert sum(r.delivered for r in results["quick"]) > 0  # and delivered beside the holder


def test_a_quiet_round_is_two_statements_to_claim_and_one_to_record(engine, sink, tenant):
    ep = endpoint(engine, tenant, sink.url("/count"))
    enqueue(engine, tenant, 5)
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if threading.current_thread() is me:
            statements.append(statement)

    me = threading.current_thread()
    event.listen(engine, "before_cursor_execute", count)
    try:
        result = deliver_once(engine, ep.id, allow_private=True)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert result.delivered == 5
    # Before (issue 45): the endpoint, its circuit (twice), its rate bucket, the day
    # bounds, the ordered flag, the claim; then the record and ``failing``: 9.
    assert len(statements) == 3, statements  # open + claim; record
    assert "FOR UPDATE OF e SKIP LOCKED" in statements[0]


def test_a_courier_thread_keeps_its_connection_across_tasks(engine, sink, tenant):
    ep = endpoint(engine, tenant, sink.url("/kept"))
    clients = PerThread(allow_private=True)
    for _ in range(3):  # three tasks, one after another, on one thread
        enqueue(engine, tenant, 2)
        assert deliver_once(engine, ep.id, client=clients.get()).delivered == 2
    assert len({r.port for r in sink.at("/kept")}) == 1  # one connection for all six
    clients.close()  # the worker shuts down: the kept connection is closed
    enqueue(engine, tenant, 1)
    deliver_once(engine, ep.id, client=clients.get())
    clients.close()
    wait_for(lambda: len(sink.at("/kept")) == 7)
    assert len({r.port for r in sink.at("/kept")}) == 2  # a new one after the close


def test_a_kept_client_still_checks_every_new_connection(engine, sink, tenant):
    clients = PerThread(allow_private=False)
    with pytest.raises(Blocked):
        clients.get().post(sink.url("/private"), b"{}", {"content-type": "application/json"})
    ep = endpoint(engine, tenant, sink.url("/private"), max_attempts=1)
    enqueue(engine, tenant, 1)
    assert deliver_once(engine, ep.id, client=clients.get()).failed == 1
    assert sink.at("/private") == []
    clients.close()


def test_a_lease_short_beside_the_timeout_still_sends_the_whole_round(engine, sink, tenant):
    """INBOX_LEASE_SECONDS of 3 s beside the endpoint's 5 s timeout: the round's lease
    leaves room for more than one attempt, so an endpoint that answers at once gets the
    whole round, not one delivery a round with the rest handed back."""
    ep = endpoint(engine, tenant, sink.url("/short"))
    ids = enqueue(engine, tenant, 5)
    got = deliver_once(engine, ep.id, allow_private=True, lease_seconds=3)
    assert (got.claimed, got.delivered, got.released) == (5, 5, 0)
    assert [r.headers["webhook-id"] for r in sink.at("/short")] == ids


def test_a_missing_endpoint_is_not_found_not_busy(engine):
    with pytest.raises(NotFound):
        deliver_once(engine, EndpointId(10**9), allow_private=True)
