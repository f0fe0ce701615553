"""``Prefer: wait``: the request is woken by the NOTIFY of the transaction that decides its
event (inbox.store.db.listener, inbox.services.intake), and reads the stored row only
when woken and once when the wait ends. The reads are counted with a spy on the read
model's function the service calls."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from flask import Flask
from sqlalchemy import Engine, text

from inbox.domain.outcomes import RunOutcome
from inbox.services import intake as service
from inbox.store.db import listener as listeners
from inbox.store.db.engine import make_engine
from inbox.store.db.listener import Listener
from inbox.store.write import queue
from tests.helpers import body_of, hmac_headers, wait_for
from web import create_app

DECISION = b'{"status":"completed","decision":"held for review"}'


class Reads:
    """Counts the service's reads of an event's stored state."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = service.stored_response

        def counted(conn: Any, event_id: int) -> Any:
            self.n += 1
            return real(conn, event_id)

        monkeypatch.setattr(service, "stored_response", counted)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    return Reads(monkeypatch)


@pytest.fixture
def listener(app: Flask) -> Listener:
    """The process's listener, listening (its first LISTEN made before the test's claims)."""
    found = app.extensions["inbox"].intake.listener()
    assert found is not None
    with found.watching("", time.monotonic()):  # starts it
        wait_for(found.listening, 30, "the listener listening")
    return found


class Waiting:
    """A ``Prefer: wait`` request on a thread of its own."""

    def __init__(self, client: Any, src: Any, seconds: int, key: str = "sync-1") -> None:
        body = body_of({"a": 1})
        headers = hmac_headers("s3cret", body, key, Prefer=f"wait={seconds}")
        self.answer: Any = None
        self.answered_at = 0.0

        def run() -> None:
            self.answer = client.post(src.path, data=body, headers=headers)
            self.answered_at = time.monotonic()

        self.started = time.monotonic()
        self.thread = threading.Thread(target=run)
        self.thread.start()

    def join(self) -> Any:
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.answer


def _decide(
    engine: Engine, notify: bool = True, before_commit: Callable[[], None] | None = None
) -> None:
    """Complete the one received event with ``DECISION``, as a worker does, and run
    ``before_commit`` just before the commit. ``notify=False``: with the session's
    triggers off (superuser), so no NOTIFY is sent: a lost notification."""
    with engine.begin() as conn:
        if not notify:
            conn.execute(text("SET LOCAL session_replication_role = replica"))
        [claim] = queue.claim(conn, "w", 10, 30)
        queue.complete(conn, claim, RunOutcome.COMPLETED, {"d": 1}, None, DECISION)
        if before_commit is not None:
            before_commit()


def _superuser(engine: Engine) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            ).scalar()
        )


def test_a_waiting_request_is_answered_by_the_push_and_reads_once(
    client, make_source, engine, listener, reads
):
    src = make_source()
    waiting = Waiting(client, src, 20)
    wait_for(lambda: listener.waiting() == 1, 30, "the request watching its event")

    def hold() -> None:
        # The deciding transaction holds its commit for a second: a request that polled
        # (every 50 ms, as this one used to) would read the row many times meanwhile.
        with engine.connect() as other:
            other.execute(text("SELECT pg_sleep(1)"))
        assert reads.n == 0  # nothing read while it waited: it was not woken

    _decide(engine, before_commit=hold)
    committed = time.monotonic()
    resp = waiting.join()
    assert resp.status_code == 200 and resp.data == DECISION
    assert reads.n == 1  # woken once by the NOTIFY, one read, answered
    # answered on the commit, not at the end of its 20 s wait
    assert waiting.answered_at - committed < 10


def test_a_lost_notify_is_answered_by_the_last_read(client, make_source, engine, listener, reads):
    if not _superuser(engine):
        pytest.skip("turning the trigger off for one session needs a superuser")
    src = make_source()
    waiting = Waiting(client, src, 3)
    wait_for(lambda: listener.waiting() == 1, 30, "the request watching its event")
    _decide(engine, notify=False)
    resp = waiting.join()
    assert resp.status_code == 200 and resp.data == DECISION
    assert reads.n == 1  # never woken: the one read at the end of the wait
    assert waiting.answered_at - waiting.started >= 3


def test_the_listener_killed_mid_wait_reconnects_and_the_request_is_answered(
    client, make_source, engine, listener, reads
):
    src = make_source()
    waiting = Waiting(client, src, 20)
    wait_for(lambda: listener.waiting() == 1, 30, "the request watching its event")
    before = listener.connects
    with engine.begin() as conn:
        killed = conn.execute(
            text("SELECT pg_terminate_backend(:pid)"), {"pid": listener.backend_pid}
        ).scalar()
    assert killed
    _decide(engine)  # its NOTIFY may find nobody listening
    resp = waiting.join()
    assert resp.status_code == 200 and resp.data == DECISION
    assert waiting.answered_at - waiting.started < 15  # before the wait ran out
    wait_for(lambda: listener.connects == before + 1, 30, "the listener listening again")
    assert reads.n <= 2  # woken by the reconnect and/or the NOTIFY, never polled


def test_a_quarantined_event_ends_the_wait_with_the_accepted_answer(
    client, make_source, engine, listener, reads
):
    src = make_source()
    waiting = Waiting(client, src, 20)
    wait_for(lambda: listener.waiting() == 1, 30, "the request watching its event")
    with engine.begin() as conn:
        [claim] = queue.claim(conn, "w", 10, 30)
        queue.fail(conn, claim, RuntimeError("no"), permanent=True, delay=0)
    resp = waiting.join()
    assert resp.status_code == 202 and resp.json["status"] == "accepted"
    assert reads.n == 1


def test_behind_a_transaction_pooler_without_a_direct_url_it_polls_a_bounded_number_of_times(
    settings, make_source, engine, reads, caplog
):
    pooled = replace(settings, db_pooler="transaction", migrate_database_url="")
    own = make_engine(settings, pool_size=2)  # a listener is per engine: one of its own
    try:
        app = create_app(pooled, engine=own, doorbell=lambda: None, route_cache_seconds=0)
        with caplog.at_level(logging.INFO, logger=listeners.__name__):
            assert app.extensions["inbox"].intake.listener() is None
            assert listeners.for_engine(own, pooled) is None
        said = [r for r in caplog.records if "INBOX_MIGRATE_DATABASE_URL" in r.getMessage()]
        assert len(said) == 1  # said once
        src = make_source()
        body = body_of({"a": 1})
        # undecided: wait=1 polls with growing pauses, a handful of reads, then 202
        resp = app.test_client().post(
            src.path, data=body, headers=hmac_headers("s3cret", body, "p1", Prefer="wait=1")
        )
        assert resp.status_code == 202
        assert 1 <= reads.n <= 6, reads.n
    finally:
        own.dispose()


def test_behind_a_transaction_pooler_the_direct_url_is_listened_on(settings):
    pooled = replace(settings, db_pooler="transaction", migrate_database_url=settings.database_url)
    own = make_engine(settings, pool_size=1)
    try:
        found = listeners.for_engine(own, pooled)
        assert found is not None
        with found.watching("", time.monotonic()):
            wait_for(found.listening, 30, "listening on the direct URL")
        found.close()
    finally:
        own.dispose()


def test_only_a_committed_decision_of_a_synchronous_event_is_notified(
    client, make_source, engine, database_url
):
    """The trigger of migration 0022: NOTIFY inbox_decided with the event's public id, from the
    transaction that decides a synchronous event, delivered only when it commits."""
    src = make_source()
    for key in ("sync", "async"):
        body = body_of({"k": key})
        assert (
            client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key)).status_code
            == 202
        )
    with engine.begin() as conn:  # one of the two as a Prefer: wait request stores it
        sync_public_id = conn.execute(
            text(
                "UPDATE events SET sync = true WHERE id = (SELECT min(id) FROM events)"
                " RETURNING public_id"
            )
        ).scalar_one()
    with psycopg.connect(database_url, autocommit=True) as listen:
        listen.execute(f"LISTEN {listeners.CHANNEL}")

        def complete_both(conn: Any) -> None:
            for claim in queue.claim(conn, "w", 10, 30):
                queue.complete(conn, claim, RunOutcome.COMPLETED, {}, None, DECISION)

        with engine.connect() as conn:
            tx = conn.begin()
            complete_both(conn)
            tx.rollback()  # decided, then rolled back: nothing to hear
        with engine.begin() as conn:
            complete_both(conn)
        heard = [n.payload for n in listen.notifies(timeout=30, stop_after=1)]
        heard += [n.payload for n in listen.notifies(timeout=0.5)]  # and nothing more
    assert heard == [sync_public_id]
