"""The claims' own connections (``inbox.store.db.claim_connections``): kept and reused, out
of the engine's pool; replaced when broken, not when a statement was merely refused."""

from __future__ import annotations

import os
import time

import psycopg
import pytest
from sqlalchemy import Engine, text

from inbox.store.db.claim_connections import Connections, for_engine
from inbox.store.db.claims import row
from tests.helpers import wait_for
from tests.integration.test_claims import _event


def _pid(conns: Connections) -> int:
    """The backend pid of the (one) idle claim connection."""
    (held,) = conns._idle
    found = held.driver.execute("SELECT pg_backend_pid()").fetchone()
    assert found is not None
    return int(found[0])


def test_one_connection_serves_statement_after_statement_outside_the_pool(
    engine: Engine, make_source
) -> None:
    src = make_source()
    conns = Connections(engine)
    for i in range(20):
        got = conns.insert([row(src, _event(f"k{i}"))])
        assert len(got) == 1
    assert conns.opened == 1
    assert engine.pool.checkedout() == 0  # not one of the pool's
    (held,) = conns._idle
    assert held.driver.autocommit
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events")).scalar() == 20


def test_a_refused_row_keeps_the_connection(engine: Engine, make_source) -> None:
    src = make_source()
    conns = Connections(engine)
    conns.insert([row(src, _event("a"))])
    before = _pid(conns)
    bad = list(row(src, _event("b")))
    bad[8] = None  # no content type: the NOT NULL constraint refuses the row
    with pytest.raises(psycopg.IntegrityError):
        conns.insert([tuple(bad)])
    assert _pid(conns) == before and conns.opened == 1
    assert len(conns.insert([row(src, _event("c"))])) == 1


def test_a_connection_the_server_dropped_is_replaced(engine: Engine, make_source) -> None:
    src = make_source()
    conns = Connections(engine)
    conns.insert([row(src, _event("a"))])
    victim = _pid(conns)
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": victim})
        conn.commit()
    with pytest.raises(psycopg.OperationalError):  # its statement fails, as a pooled one's
        conns.insert([row(src, _event("b"))])
    assert conns._idle == []  # closed, not kept
    assert len(conns.insert([row(src, _event("c"))])) == 1
    assert conns.opened == 2 and _pid(conns) != victim


def test_an_old_connection_is_recycled(engine: Engine, make_source) -> None:
    src = make_source()
    conns = Connections(engine, recycle_s=0.0)
    conns.insert([row(src, _event("a"))])
    (first,) = conns._idle
    wait_for(lambda: time.monotonic() > first.born)  # older than the recycle age, which is 0
    conns.insert([row(src, _event("b"))])
    assert conns.opened == 2 and first.driver.closed


def test_a_forked_child_makes_its_own(engine: Engine, make_source) -> None:
    src = make_source()
    conns = Connections(engine)
    conns.insert([row(src, _event("a"))])
    parent = _pid(conns)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            engine.dispose(close=False)  # as a forked worker must: the pool's are the parent's
            conns.insert([row(src, _event("b"))])
            code = 0 if conns.opened == 2 and _pid(conns) != parent else 2
        finally:
            os._exit(code)
    os.close(write)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _pid(conns) == parent  # the parent's connection was left alone, and works
    assert len(conns.insert([row(src, _event("c"))])) == 1


def test_one_set_per_engine(engine: Engine) -> None:
    assert for_engine(engine) is for_engine(engine)
