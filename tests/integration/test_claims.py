"""Group commit of claims (inbox.store.db.group_commit, inbox.store.db.claims) against real
PostgreSQL.

To make the batching deterministic, a first claim is held up by another transaction
(an uncommitted row with its key, or a table lock) while more claims queue behind it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, Engine, text

from inbox.domain.intake import Prepared
from inbox.domain.records import Source
from inbox.store.db.claims import Copy, execute, row
from inbox.store.db.group_commit import Claims
from inbox.store.write.intake import ingest
from tests.helpers import wait_for


def _event(key: str | None, event_type: str = "t") -> Prepared:
    return Prepared(
        public_id=f"evt_{secrets.token_hex(8)}",
        key_digest=None if key is None else hashlib.sha256(key.encode()).digest(),
        key_expires_hours=24,
        event_type=event_type,
        business_key_digest=None,
        content_type="application/json",
        body=b"{}",
        body_sha256=hashlib.sha256(b"{}").digest(),
        headers={"content-type": "application/json"},
        response_status=202,
        response_body=b'{"status":"accepted"}',
        wait_seconds=None,
    )


class Racer:
    """Runs claims on threads; keeps each one's outcome (an event id, None or an error)."""

    def __init__(self, claims: Claims, src: Source) -> None:
        self.claims, self.src = claims, src
        self.threads: list[threading.Thread] = []
        self.outcomes: dict[str, Any] = {}

    def start(self, ev: Prepared) -> None:
        def run() -> None:
            try:
                self.outcomes[ev.public_id] = self.claims.claim(self.src, ev)
            except Exception as exc:
                self.outcomes[ev.public_id] = exc

        t = threading.Thread(target=run)
        t.start()
        self.threads.append(t)

    def join(self) -> None:
        for t in self.threads:
            t.join(10)
            assert not t.is_alive(), "a claim never returned"


def _until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    wait_for(cond, timeout)


_WAITING = (
    "datname = current_database() AND wait_event_type = 'Lock'"
    " AND query LIKE 'WITH v (public_id, %'"  # the claim (the text is cut at 1 KiB)
)


def _blocked(engine: Engine, terminate: bool = False) -> int:
    """Claim statements now waiting for a lock (ended first, with ``terminate``)."""
    what = "pg_terminate_backend(pid)" if terminate else "*"
    with engine.connect() as conn:
        sql = f"SELECT count({what}) FROM pg_stat_activity WHERE {_WAITING}"
        return int(conn.execute(text(sql)).scalar_one())


@contextmanager
def _holding_key(engine: Engine, src: Source, key: str) -> Iterator[Connection]:
    """Another transaction that has claimed ``key`` and not committed; rolled back at exit."""
    with engine.connect() as conn:
        tx = conn.begin()
        execute(conn.connection, [row(src, _event(key))])
        yield conn
        tx.rollback()


def _rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT id, public_id, key_digest FROM events ORDER BY id")))


@pytest.fixture
def claims(engine: Engine) -> Claims:
    """One statement out at a time: the queue is easy to see."""
    return Claims(engine, max_statements=1)


def test_a_second_statement_goes_out_while_the_first_waits(engine, make_source):
    """With two statements per process, a claim arriving while one waits goes at once;
    the claims after it queue behind both and share the next ones (one or two, as the two
    that are out finish)."""
    src = make_source()
    claims = Claims(engine, max_statements=2)
    racer = Racer(claims, src)
    with _holding_key(engine, src, "held"), _holding_key(engine, src, "held2"):
        racer.start(_event("held"))
        _until(lambda: _blocked(engine) == 1)
        racer.start(_event("held2"))
        _until(lambda: _blocked(engine) == 2)
        assert claims.statements == 2
        queued = [_event(f"q{i}") for i in range(4)]
        for ev in queued:
            racer.start(ev)
        _until(lambda: claims.pending() == len(queued))
        assert claims.statements == 2
    racer.join()
    assert claims.statements in (3, 4)
    stored = {r.public_id for r in _rows(engine)}
    assert {ev.public_id for ev in queued} <= stored


def test_claims_that_queue_behind_a_statement_share_the_next_one(engine, make_source, claims):
    src = make_source()
    racer = Racer(claims, src)
    first = _event("held")
    with _holding_key(engine, src, "held"):
        racer.start(first)
        _until(lambda: _blocked(engine) == 1)
        queued = [_event(f"k{i}") for i in range(5)] + [_event(None)]
        for ev in queued:
            racer.start(ev)
        _until(lambda: claims.pending() == len(queued))
        assert claims.statements == 1  # they wait for the statement that is out
    racer.join()
    assert claims.statements == 2  # ...and then go together
    stored = {r.public_id: r.id for r in _rows(engine)}
    assert len(stored) == 7
    # each request hears its own row's id, and only once that row is committed
    for ev in [first, *queued]:
        assert racer.outcomes[ev.public_id] == stored[ev.public_id]


def test_copies_of_one_key_never_share_a_statement(engine, make_source, claims):
    src = make_source()
    racer = Racer(claims, src)
    copies = [_event("same") for _ in range(3)]
    other = _event("other")
    with _holding_key(engine, src, "held"):
        racer.start(_event("held"))
        _until(lambda: _blocked(engine) == 1)
        for ev in [*copies, other]:
            racer.start(ev)
        _until(lambda: claims.pending() == 4)
    racer.join()
    # the first copy goes with `other`; each later copy in a statement of its own
    assert claims.statements == 4
    won = [ev for ev in copies if isinstance(racer.outcomes[ev.public_id], int)]
    assert len(won) == 1
    # the rest find the key taken by the same body: each is answered, in its own
    # statement, with the winner's event and its first answer
    answered = [racer.outcomes[ev.public_id] for ev in copies if ev is not won[0]]
    winner = racer.outcomes[won[0].public_id]
    assert answered == [Copy(winner, won[0].public_id, 202, b'{"status":"accepted"}')] * 2
    stored = {r.public_id for r in _rows(engine)}
    assert len(stored) == 3  # held (rolled back, then claimed by its own copy), one, other
    assert {won[0].public_id, other.public_id} <= stored
    assert not {ev.public_id for ev in copies if ev is not won[0]} & stored


def test_a_row_the_database_refuses_fails_alone(engine, make_source, claims):
    src = make_source()
    racer = Racer(claims, src)
    bad = _event("bad", event_type="nul\x00byte")  # text cannot hold NUL: a DataError
    good = [_event(f"good{i}") for i in range(3)]
    with _holding_key(engine, src, "held"):
        racer.start(_event("held"))
        _until(lambda: _blocked(engine) == 1)
        for ev in [good[0], bad, good[1], good[2]]:
            racer.start(ev)
        _until(lambda: claims.pending() == 4)
    racer.join()
    assert isinstance(racer.outcomes[bad.public_id], psycopg.DataError)
    stored = {r.public_id: r.id for r in _rows(engine)}
    assert bad.public_id not in stored
    for ev in good:
        assert racer.outcomes[ev.public_id] == stored[ev.public_id]


def test_a_failed_statement_fails_every_claim_in_it_and_the_next_ones_recover(
    engine, make_source, claims
):
    src = make_source()
    racer = Racer(claims, src)
    first = _event("first")
    queued = [_event(f"q{i}") for i in range(3)]
    with engine.connect() as locker:
        tx = locker.begin()
        locker.execute(text("LOCK TABLE event_keys IN ACCESS EXCLUSIVE MODE"))
        racer.start(first)
        _until(lambda: _blocked(engine) == 1)
        for ev in queued:
            racer.start(ev)
        _until(lambda: claims.pending() == 3)
        assert _blocked(engine, terminate=True) == 1  # the first statement's connection dies
        _until(lambda: claims.statements == 2 and _blocked(engine) == 1)
        assert claims.pending() == 0  # all three rode in the second statement
        assert _blocked(engine, terminate=True) == 1  # ...which dies too
        racer.join()
        tx.rollback()
    errors = [racer.outcomes[ev.public_id] for ev in [first, *queued]]
    assert all(isinstance(e, psycopg.OperationalError) for e in errors)
    # each thread raised an object of its own (raising one object from several threads
    # would grow one traceback from all of them); the copies keep the driver's details
    assert len({id(e) for e in errors}) == 4
    assert len({e.sqlstate for e in errors[1:]}) == 1
    assert _rows(engine) == []
    # nothing is stuck: the next claims go through on fresh connections
    again = [_event(f"q{i}") for i in range(3)]
    ids = [claims.claim(src, ev) for ev in again]
    assert all(isinstance(i, int) for i in ids) and len(_rows(engine)) == 3


def test_the_duplicate_path_claims_a_key_pruned_in_between(engine, make_source):
    """``ingest`` answers keys that ``claim`` found taken; if the row is gone by then (pruned),
    it claims the key itself, inside its transaction."""
    src = make_source()
    ev = _event("pruned")
    with engine.begin() as conn:
        result = ingest(conn, src, ev)
    assert result.outcome == "accepted" and result.public_id == ev.public_id
    assert [(r.id, r.public_id) for r in _rows(engine)] == [(result.event_id, ev.public_id)]


def _keys_in_lock_order(n: int) -> list[str]:
    """Key names whose digests (``_event``'s) sort in the order given."""
    names = [f"order-{i}" for i in range(n * 4)]
    return sorted(names, key=lambda k: hashlib.sha256(k.encode()).digest())[:n]


def test_a_statement_chosen_as_a_deadlock_victim_fails_every_claim_it_carried(engine, make_source):
    """Another transaction holds key b and then asks for key a, which the statement has
    taken while it waits for b: a deadlock, and the statement is the victim (the other
    session's detector is set to look later). The group commit does not send it again:
    each claim it carried hears the deadlock (an error object of its own), and the
    receiver's service owns the one retry (tests/integration/test_ingest_retry.py)."""
    src = make_source()
    a, b = _keys_in_lock_order(2)
    claims = Claims(engine, timeout_s=30, max_statements=1)  # slow machine: no deadline
    racer = Racer(claims, src)
    later = time.monotonic() + 30
    with engine.connect() as other:
        tx = other.begin()
        other.execute(text("SET LOCAL deadlock_timeout = '20s'"))
        other.execute(text("SET LOCAL statement_timeout = '30s'"))
        other.execute(text("SET LOCAL lock_timeout = '30s'"))
        execute(other.connection, [row(src, _event(b))], later)
        with _holding_key(engine, src, "held"):  # the next statement carries a and b
            racer.start(_event("held"))
            _until(lambda: _blocked(engine) == 1)
            ev_a, ev_b = _event(a), _event(b)
            racer.start(ev_a)
            racer.start(ev_b)
            _until(lambda: claims.pending() == 2)
        _until(lambda: claims.statements == 2 and _blocked(engine) == 1)  # a in, waits on b
        asks_for_a = threading.Thread(
            target=lambda: execute(other.connection, [row(src, _event(a))], later)
        )
        asks_for_a.start()
        racer.join()
        asks_for_a.join(15)
        tx.commit()
    got_a, got_b = racer.outcomes[ev_a.public_id], racer.outcomes[ev_b.public_id]
    assert isinstance(got_a, psycopg.errors.DeadlockDetected)
    assert isinstance(got_b, psycopg.errors.DeadlockDetected)
    assert got_a is not got_b
    assert claims.statements == 2  # the held claim's, then the victim: never sent again
    # the victim stored nothing: both keys are the other session's
    stored = {r.public_id for r in _rows(engine)}
    assert ev_a.public_id not in stored and ev_b.public_id not in stored


_TOUCHES = text(
    "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
    " WHERE relname = 'event_keys' OR relname LIKE 'events%'"
)


def _touched(conn: Connection, before: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """What this transaction did to event_keys and the events partitions since ``before``
    (its counts not yet flushed are shown too, so the difference is the statement's)."""
    after = {r[0]: r[1:] for r in conn.execute(_TOUCHES)}
    delta = {
        name: tuple(a - b for a, b in zip(got, before.get(name, (0, 0, 0)), strict=True))
        for name, got in after.items()
    }
    return {name: d for name, d in delta.items() if any(d)}


def test_a_copy_is_answered_by_the_claim_itself_with_one_hot_update(engine, make_source):
    """A retry storm costs what a first delivery does: the copy's claim statement counts
    it on its key (one HOT update, no event row) and returns the first answer, with no
    second round trip."""
    src = make_source()
    first = _event("storm")
    with engine.begin() as conn:
        [event_id] = execute(conn.connection, [row(src, first)]).values()
    copy = _event("storm")
    with engine.begin() as conn:
        before = {r[0]: r[1:] for r in conn.execute(_TOUCHES)}
        got = execute(conn.connection, [row(src, copy)])
        touched = _touched(conn, before)
    assert got == {copy.public_id: Copy(event_id, first.public_id, 202, first.response_body)}
    assert touched == {"event_keys": (0, 1, 1)}, touched  # no insert anywhere; HOT
    with engine.connect() as conn:
        counted = conn.execute(text("SELECT duplicate_count FROM event_keys")).scalar_one()
    assert counted == 1
    assert [r.public_id for r in _rows(engine)] == [first.public_id]


def test_another_body_or_a_synchronous_copy_is_left_to_the_duplicate_path(engine, make_source):
    """Not a plain copy: the claim returns no row and counts nothing; the duplicate path
    records the conflict, or reads the synchronous event's state and decision."""
    src = make_source()
    with engine.begin() as conn:
        execute(conn.connection, [row(src, _event("k"))])
        execute(conn.connection, [row(src, dataclasses.replace(_event("s"), wait_seconds=5))])
    other_body = dataclasses.replace(_event("k"), body_sha256=hashlib.sha256(b"[]").digest())
    sync_copy = dataclasses.replace(_event("s"), wait_seconds=5)
    with engine.begin() as conn:
        assert execute(conn.connection, [row(src, other_body), row(src, sync_copy)]) == {}
    with engine.connect() as conn:
        counts = conn.execute(text("SELECT sum(duplicate_count) FROM event_keys")).scalar_one()
    assert counts == 0
    assert len(_rows(engine)) == 2


def test_a_claim_neither_checks_nor_locks_its_tenant_and_source(engine, make_source):
    """Claimed rows pay no per-row foreign key into tenants and sources: no lookup, and no
    KEY SHARE lock on the one source row that every web process's claims would share (a
    lock writes the locker's transaction id into the row's xmax)."""
    src = make_source()
    lockers = text(
        "SELECT (SELECT xmax FROM tenants WHERE id = :t)::text,"
        " (SELECT xmax FROM sources WHERE id = :s)::text"
    )
    ids = {"t": src.tenant_id, "s": src.id}
    with engine.connect() as conn:
        before = tuple(conn.execute(lockers, ids).one())
    with engine.begin() as conn:
        execute(conn.connection, [row(src, _event(f"k{i}")) for i in range(3)])
        mine = conn.execute(text("SELECT (pg_current_xact_id()::text::bigint % 4294967296)::text"))
        xid = mine.scalar_one()
        during = tuple(conn.execute(lockers, ids).one())
    assert xid not in during
    assert during == before
    assert len(_rows(engine)) == 3


@pytest.mark.parametrize("table", ["sources", "tenants"])
def test_tenants_and_sources_are_never_deleted(engine, make_source, table):
    """What the foreign keys guarded, an event naming a tenant or source that is gone,
    cannot happen: neither is ever deleted, with or without events (disable a source)."""
    src = make_source()
    ident = src.id if table == "sources" else src.tenant_id
    with pytest.raises(Exception, match="never deleted") as raised:
        with engine.begin() as conn:
            conn.execute(text(f"DELETE FROM {table} WHERE id = :i"), {"i": ident})
    assert isinstance(getattr(raised.value, "orig", None), psycopg.errors.RestrictViolation)
    with engine.connect() as conn:
        assert (
            conn.execute(
                text(f"SELECT count(*) FROM {table} WHERE id = :i"), {"i": ident}
            ).scalar_one()
            == 1
        )
