"""The workers' claim plans over the days that can hold unfinished events (the floor), and
never misses one: a replay of an old dead letter lowers the floor in its own statement."""

from __future__ import annotations

import datetime as dt
import re

from sqlalchemy import Engine, text

from inbox.domain import ledger
from inbox.store.write import deliveries, operator, queue
from tests.integration.test_partitions import _plan, add_day, cover_open_days, today

_SCANNED = re.compile(r"\bevents_(?:p\d{8}|default)\b")


def _floor(engine: Engine) -> int:
    with engine.begin() as conn:
        return queue.raise_floor(conn)


def _claimed(engine: Engine) -> list[int]:
    with engine.begin() as conn:
        return [c.id for c in queue.claim(conn, "w", 10, 30)]


def test_the_claim_is_planned_over_the_days_from_the_floor_only(engine, make_source, made_days):
    src = make_source()
    cover_open_days(engine, made_days)
    old = today(engine) - dt.timedelta(days=20)
    add_day(engine, made_days, old, src)  # a finished old day
    floor = _floor(engine)
    assert floor >= ledger.bounds(old + dt.timedelta(days=1))[0]
    with engine.connect() as conn:
        bounds = conn.execute(queue._CLAIM_BOUNDS).one()
    assert bounds.floor == floor
    params = {"owner": "w", "limit": 10, "per_tenant": 10, "lease": 30, "capped": []}
    plan = _plan(engine, queue._CLAIM.over(floor, bounds.tomorrow).text, params)
    scanned = {ledger.day_of_partition("events", n) for n in _SCANNED.findall(plan)}
    # from the floor's day to tomorrow's: not the old day, not the week ahead, not DEFAULT
    assert scanned == {
        ledger.day_of(floor) + dt.timedelta(days=n)
        for n in range((ledger.day_of(bounds.tomorrow) - ledger.day_of(floor)).days + 1)
    }, plan


def test_the_floor_stays_at_the_oldest_unfinished_event(engine, make_source, made_days):
    src = make_source()
    old = today(engine) - dt.timedelta(days=10)
    waiting = add_day(engine, made_days, old, src, event_state="received")
    assert _floor(engine) == waiting
    assert _claimed(engine) == [waiting]  # below no floor: it is claimed
    with engine.begin() as conn:
        conn.execute(text("UPDATE events SET state = 'completed' WHERE id = :i"), {"i": waiting})
    # nothing unfinished: the start of the day an hour ago, never above it
    with engine.connect() as conn:
        hour_ago = conn.execute(text("SELECT (now() - interval '1 hour')::date")).scalar_one()
    assert _floor(engine) == ledger.bounds(hour_ago)[0]


def test_a_replayed_old_dead_letter_lowers_the_floor_and_is_claimed(engine, make_source, made_days):
    src = make_source()
    old = today(engine) - dt.timedelta(days=30)
    dead = add_day(engine, made_days, old, src, event_state="quarantined")
    floor = _floor(engine)
    assert floor > dead  # a dead letter is finished: the claim looks above it
    assert _claimed(engine) == []
    with engine.begin() as conn:
        [public_id] = conn.execute(
            text("SELECT public_id FROM events WHERE id = :i"), {"i": dead}
        ).scalars()
        assert operator.replay(conn, [public_id], "op") == [public_id]
    with engine.connect() as conn:
        assert queue.floor(conn) == dead
    assert _claimed(engine) == [dead]


def test_a_batchs_statements_are_planned_over_its_days_only(engine, make_source, made_days):
    """Loading and completing a claimed batch name events by a list of ids: bounded by the
    days of the batch's lowest and highest id, they are planned over those days alone."""
    import json

    from inbox.store.write import batch

    src = make_source()
    old = today(engine) - dt.timedelta(days=15)
    add_day(engine, made_days, old, src)
    day = today(engine) + dt.timedelta(days=2)  # made ahead, with its neighbours
    ids = [ledger.make_id(day, 1), ledger.make_id(day, 2)]
    plans = {
        "load": (batch._LOAD_MANY.spanning(ids).text, {"ids": ids, "fences": [1, 1]}),
        "complete": (batch._COMPLETE_MANY.spanning(ids).text, {"rows": json.dumps([])}),
    }
    for name, (sql, params) in plans.items():
        plan = _plan(engine, sql, params)
        scanned = set(re.findall(r"\b(?:events|steps)_(?:p\d{8}|default)\b", plan))
        assert scanned <= {
            ledger.partition_name("events", day),
            ledger.partition_name("steps", day),
        }, (name, plan)


def _delivery(engine, event_id: int) -> tuple[int, str, int]:
    """The delivery ``add_day`` made for ``event_id``: its id, webhook-id and endpoint."""
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT id, public_id, endpoint_id FROM deliveries WHERE event_id = :e"),
            {"e": event_id},
        ).one()
    return int(row.id), str(row.public_id), int(row.endpoint_id)


def _sent(engine, endpoint_id: int) -> list[int]:
    with engine.begin() as conn:
        return [c.id for c in deliveries.claim(conn, endpoint_id, "c", 8, 30)]


def test_the_floor_stays_at_the_oldest_waiting_delivery(engine, make_source, made_days):
    src = make_source()
    old = today(engine) - dt.timedelta(days=12)
    event_id = add_day(engine, made_days, old, src, delivery_state="pending")  # a retry, due
    delivery_id, _, endpoint_id = _delivery(engine, event_id)
    assert _floor(engine) == delivery_id  # its event finished long ago: the delivery keeps it
    assert _sent(engine, endpoint_id) == [delivery_id]


def test_a_replayed_old_failed_delivery_lowers_the_floor_and_is_sent(
    engine, make_source, made_days
):
    src = make_source()
    old = today(engine) - dt.timedelta(days=30)
    event_id = add_day(engine, made_days, old, src, delivery_state="failed")
    delivery_id, webhook_id, endpoint_id = _delivery(engine, event_id)
    assert _floor(engine) > delivery_id  # a failed delivery is finished: the courier looks above
    assert _sent(engine, endpoint_id) == []
    with engine.begin() as conn:
        assert deliveries.replay(conn, [webhook_id], "op") == [(webhook_id, endpoint_id)]
    with engine.connect() as conn:
        assert queue.floor(conn) == delivery_id
    assert _sent(engine, endpoint_id) == [delivery_id]
