"""The drain's statements touch only the days of the events they name, generic plans too.

psycopg prepares a statement after a few executions and PostgreSQL then runs its generic
plan, which keeps every partition the statement's text does not rule out and locks them
all on each execution; a foreign key into the whole partitioned table is checked the same
way, once per row. Here every statement is prepared at once and planned generic, and the
transaction's locks must name no day but the event's (and tomorrow's, for the claim),
however many days the ledger holds.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import Connection, text

from inbox.domain import ledger
from inbox.domain.records import ClaimedDelivery, Completion
from inbox.store.write import batch, deliveries, queue
from tests.integration.ledger_support import put_delivery, put_event
from tests.integration.test_partitions import add_day, cover_open_days, today

LEDGER = ("events", "steps", "event_attempts", "deliveries", "delivery_attempts")


def _old_days(engine, made_days, src, n: int = 12) -> list[dt.date]:
    cover_open_days(engine, made_days)
    start = today(engine)
    days = [start - dt.timedelta(days=10 + k) for k in range(n)]
    for day in days:
        add_day(engine, made_days, day, src)
    return days


def _waiting(engine, src, n: int = 900) -> int:
    """An event of today, due; the floor raised above the old days (as the sweep does)."""
    with engine.begin() as conn:
        event_id, _ = put_event(conn, today(engine), n, src, "received")
        conn.execute(text("DELETE FROM steps WHERE event_id = :e"), {"e": event_id})
    with engine.begin() as conn:
        queue.raise_floor(conn)
    return event_id


def _open_days(engine) -> set[dt.date]:
    """The days a claim may look at now: from the floor's day (at most the start of the day
    an hour ago, so yesterday just after midnight) to tomorrow."""
    with engine.connect() as conn:
        lo = ledger.day_of(queue.floor(conn))
        hi = today(engine) + dt.timedelta(days=1)
    return {lo + dt.timedelta(days=n) for n in range((hi - lo).days + 1)}


def _generic(conn: Connection) -> None:
    """Every statement of this transaction prepared at once and run by its generic plan."""
    conn.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
    conn.connection.driver_connection.prepare_threshold = 0


def _locked_days(conn: Connection) -> dict[str, set[dt.date | None]]:
    """The ledger partitions this transaction holds a lock on, by table (None: DEFAULT)."""
    rows = conn.execute(
        text(
            "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND c.relkind = 'r'"
        )
    )
    found: dict[str, set[dt.date | None]] = {t: set() for t in LEDGER}
    for r in rows:
        for t in LEDGER:
            if r.relname == f"{t}_default":
                found[t].add(None)
            elif (day := ledger.day_of_partition(t, r.relname)) is not None:
                found[t].add(day)
    return found


def _in_generic_transaction(engine, work) -> dict[str, set[dt.date | None]]:
    with engine.connect() as conn:
        driver = conn.connection.driver_connection
        threshold = driver.prepare_threshold
        try:
            with conn.begin():
                _generic(conn)
                work(conn)
                return _locked_days(conn)
        finally:
            driver.prepare_threshold = threshold


def test_a_batch_locks_only_its_days(engine, make_source, made_days):
    src = make_source()
    old = _old_days(engine, made_days, src)
    event_id = _waiting(engine, src)
    done: set[int] = set()

    def work(conn: Connection) -> None:
        claims = queue.claim(conn, "w", 10, 30)
        assert [c.id for c in claims] == [event_id]
        assert set(batch.load_many(conn, claims)) == {event_id}
        assert queue.extend(conn, claims, 30) == 1
        done.update(batch.complete_many(conn, [Completion(claims[0], {"s": 1}, "ok", {}, None)]))

    locked = _in_generic_transaction(engine, work)
    assert done == {event_id}
    day = today(engine)
    assert locked["events"] and locked["events"] <= _open_days(engine), locked
    assert locked["steps"] <= {day}, locked  # the step written (and its key checked)
    assert not any(d in old for days in locked.values() for d in days)


def test_one_event_at_a_time_locks_only_its_day(engine, make_source, made_days):
    src = make_source()
    _old_days(engine, made_days, src)
    first, second = _waiting(engine, src), _waiting(engine, src, 901)

    def work(conn: Connection) -> None:
        a, b = queue.claim(conn, "w", 10, 30)
        assert {a.id, b.id} == {first, second}
        queue.load(conn, a)
        queue.record_steps(conn, a, {"checked": {"ok": True}}, 30)
        queue.complete(conn, a, "ok", {}, None, None)
        queue.fail(conn, b, RuntimeError("down"), permanent=False, delay=60)

    locked = _in_generic_transaction(engine, work)
    day = today(engine)
    assert locked["events"] <= _open_days(engine), locked
    assert locked["steps"] <= {day} and locked["event_attempts"] <= {day}, locked


@dataclass(frozen=True)
class _Sent:
    """One attempt's result, as the courier hands it to ``finish_many``."""

    claim: ClaimedDelivery
    at: dt.datetime
    state: str = "pending"
    status: int | None = 503
    error: str | None = "HTTP 503"
    delay: float = 0.0
    latency_ms: float = 5.0
    excerpt: str | None = None


def test_a_couriers_round_locks_only_its_days(engine, make_source, made_days):
    src = make_source()
    old = _old_days(engine, made_days, src)
    day = today(engine)
    with engine.begin() as conn:
        event_id, _ = put_event(conn, day, 902, src, "completed")
        webhook_id = put_delivery(conn, day, 902, src, event_id, "pending")
        endpoint_id = conn.execute(
            text("SELECT endpoint_id FROM deliveries WHERE public_id = :p"), {"p": webhook_id}
        ).scalar_one()
    with engine.begin() as conn:
        queue.raise_floor(conn)
    now = dt.datetime.now(dt.UTC)

    def work(conn: Connection) -> None:
        [c] = deliveries.claim(conn, endpoint_id, "c", 8, 30)
        assert c.public_id == webhook_id
        assert deliveries.finish_many(conn, [_Sent(c, now)]) == {c.id}  # retry at once
        again = deliveries.claim(conn, endpoint_id, "c", 8, 30)
        assert [a.id for a in again] == [c.id]
        deliveries.release(conn, again, 0.0)

    locked = _in_generic_transaction(engine, work)
    assert locked["deliveries"] and locked["deliveries"] <= _open_days(engine), locked
    assert locked["delivery_attempts"] <= {day}, locked  # the attempt written, its key checked
    assert not any(d in old for days in locked.values() for d in days), locked
