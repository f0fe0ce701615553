"""The event and delivery state machines against the database's own guards.

``inbox.domain.states`` holds the transition tables; the triggers ``events_state_guard`` and
``deliveries_state_guard`` enforce them in PostgreSQL. A Hypothesis state machine walks both:
each rule tries one transition in SQL and asserts the database accepts exactly what the table
(and ``transition()``) allows. An exhaustive check of every pair backs the walk up.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import IntegrityError

from inbox.domain.errors import InvalidTransition
from inbox.domain.states import (
    DELIVERY_ALLOWED,
    EVENT_ALLOWED,
    DeliveryState,
    EventState,
    transition,
)


def seed(conn: Connection, event_state: str, delivery_state: str) -> tuple[int, int]:
    """One tenant, source, event, endpoint and delivery; the event's and delivery's ids."""
    tag = uuid.uuid4().hex[:12]
    tenant_id = conn.execute(
        text("INSERT INTO tenants (name) VALUES (:n) RETURNING id"), {"n": f"g-{tag}"}
    ).scalar_one()
    source_id = conn.execute(
        text("INSERT INTO sources (tenant_id, name, scheme) VALUES (:t, 'g', 'none') RETURNING id"),
        {"t": tenant_id},
    ).scalar_one()
    event_id = conn.execute(
        text(
            "INSERT INTO events (public_id, tenant_id, source_id, content_type, body_sha256,"
            " response_status, response_body, state)"
            " VALUES (:p, :t, :s, 'application/json', '\\x00', 202, '', :state) RETURNING id"
        ),
        {"p": f"evt_{tag}", "t": tenant_id, "s": source_id, "state": event_state},
    ).scalar_one()
    endpoint_id = conn.execute(
        text(
            "INSERT INTO endpoints (public_id, tenant_id, url)"
            " VALUES (:p, :t, 'https://hooks.example/x') RETURNING id"
        ),
        {"p": f"ep_{tag}", "t": tenant_id},
    ).scalar_one()
    delivery_id = conn.execute(
        text(
            "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type,"
            " body, state) VALUES (:p, :t, :e, :ev, 'x', '\\x00', :state) RETURNING id"
        ),
        {
            "p": f"msg_{tag}",
            "t": tenant_id,
            "e": endpoint_id,
            "ev": event_id,
            "state": delivery_state,
        },
    ).scalar_one()
    return int(event_id), int(delivery_id)


def db_accepts(conn: Connection, table: str, row_id: int, target: str) -> bool:
    """Try ``UPDATE table SET state = target`` in a savepoint; whether the guard let it pass."""
    savepoint = conn.begin_nested()
    try:
        conn.execute(
            text(f"UPDATE {table} SET state = :s WHERE id = :id"), {"s": target, "id": row_id}
        )
    except IntegrityError:
        savepoint.rollback()
        return False
    savepoint.commit()
    return True


def table_allows(current: Any, target: Any) -> bool:
    try:
        transition(current, target)
    except InvalidTransition:
        return False
    return True


def test_the_walk_through_both_machines_matches_the_guards(engine: Engine) -> None:
    class Walk(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.conn = engine.connect()
            self.tx = self.conn.begin()
            self.event_id, self.delivery_id = seed(self.conn, "received", "pending")
            self.event = EventState.RECEIVED
            self.delivery = DeliveryState.PENDING

        def teardown(self) -> None:
            self.tx.rollback()
            self.conn.close()

        @rule(to=st.sampled_from(EventState))
        def move_event(self, to: EventState) -> None:
            accepted = db_accepts(self.conn, "events", self.event_id, to)
            if to == self.event:
                assert accepted  # no change of state: nothing to guard
                return
            assert accepted == ((self.event, to) in EVENT_ALLOWED)
            assert accepted == table_allows(self.event, to)
            if accepted:
                self.event = to

        @rule(to=st.sampled_from(DeliveryState))
        def move_delivery(self, to: DeliveryState) -> None:
            accepted = db_accepts(self.conn, "deliveries", self.delivery_id, to)
            if to == self.delivery:
                assert accepted
                return
            assert accepted == ((self.delivery, to) in DELIVERY_ALLOWED)
            assert accepted == table_allows(self.delivery, to)
            if accepted:
                self.delivery = to

        @invariant()
        def rows_are_where_the_model_is(self) -> None:
            event = self.conn.execute(
                text("SELECT state FROM events WHERE id = :id"), {"id": self.event_id}
            ).scalar_one()
            delivery = self.conn.execute(
                text("SELECT state FROM deliveries WHERE id = :id"), {"id": self.delivery_id}
            ).scalar_one()
            assert (event, delivery) == (self.event, self.delivery)

    run_state_machine_as_test(
        Walk,
        settings=settings(
            max_examples=30,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


@pytest.mark.parametrize(
    ("table", "states", "allowed"),
    [("events", EventState, EVENT_ALLOWED), ("deliveries", DeliveryState, DELIVERY_ALLOWED)],
)
def test_every_pair_the_guard_accepts_is_in_the_table(
    engine: Engine, table: str, states: Any, allowed: frozenset[Any]
) -> None:
    accepted = set()
    for a in states:
        for b in states:
            if a == b:
                continue
            with engine.connect() as conn, conn.begin() as tx:
                event_id, delivery_id = seed(
                    conn,
                    a if table == "events" else "received",
                    a if table == "deliveries" else "pending",
                )
                row_id = event_id if table == "events" else delivery_id
                if db_accepts(conn, table, row_id, b):
                    accepted.add((a, b))
                tx.rollback()
    assert accepted == set(allowed)
