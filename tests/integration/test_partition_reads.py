"""The console's and API's reads against a ledger of several days: one event's page
plans only the partitions of the event's day and later (a delivery is never older than
its event), and a tenant's dead letters are filtered on the ledger's own columns."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from inbox.domain import ledger
from inbox.store.reads import deliveries as delivery_reads
from inbox.store.schema import partitions
from tests.integration.ledger_support import put_delivery, put_event
from tests.integration.ui_support import new_token, sign_in

LEDGER = ("events", "deliveries", "delivery_attempts", "steps", "event_attempts")


@pytest.fixture
def world(engine, make_source, made_days) -> dict[str, Any]:
    """Eight days before today with partitions: older days hold other events and
    deliveries; tenant ta's quarantined event is on day -3, its failed delivery on that
    day and a second delivery (a replay's, say) on day -2."""
    with engine.connect() as conn:
        today = partitions.today(conn)
    days = [today - dt.timedelta(days=n) for n in range(8, 0, -1)]
    day, later = days[-3], days[-2]
    ta, tb = make_source(tenant="ta"), make_source(tenant="tb")
    with engine.begin() as conn:
        for d in days:
            partitions.make_day(conn, d)
            made_days.append(d)
        for i, d in enumerate(days[:-3]):  # the older days: other events of both tenants
            eid, _ = put_event(conn, d, 1, ta, "quarantined")
            put_delivery(conn, d, 1, ta, eid, "failed")
            put_event(conn, d, 2, tb, "quarantined" if i % 2 else "completed")
        event_id, public_id = put_event(conn, day, 7, ta, "quarantined")
        first = put_delivery(conn, day, 7, ta, event_id, "failed")
        second = put_delivery(conn, later, 8, ta, event_id, "delivered")
        done, _ = put_event(conn, later, 9, ta, "completed")  # not a dead letter
        put_delivery(conn, later, 9, ta, done, "delivered")
        _, other = put_event(conn, later, 10, tb, "quarantined")  # another tenant's
    return {
        "day": day,
        "event": public_id,
        "deliveries": [first, second],
        "other": other,
        "operator": new_token(engine, "reads-op", "operator"),
    }


class Statements:
    """The statements the app sends while it is on, with their parameters."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.startswith("EXPLAIN"):  # the test's own
            return
        if not executemany and isinstance(parameters, dict):
            self.sent.append((statement, dict(parameters)))


@pytest.fixture
def statements(engine: Engine) -> Iterator[Statements]:
    seen = Statements()
    event.listen(engine, "before_cursor_execute", seen)
    yield seen
    event.remove(engine, "before_cursor_execute", seen)


def planned(engine: Engine, statement: str, parameters: dict[str, Any]) -> set[str]:
    """The relations PostgreSQL plans for the statement, run with the same parameters
    (partitions pruned when planning are not in the plan at all)."""
    with engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, parameters).scalar()
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "Relation Name" in node:
                names.add(node["Relation Name"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(plan if not isinstance(plan, str) else json.loads(plan))
    return names


def older_partitions(engine: Engine, sent, day: dt.date, read: set[str]) -> dict[str, set[str]]:
    """Each ledger statement sent -> the partitions it plans of days before ``day``
    (events: before the day before, since a public id's lookup covers the day either
    side for clocks around midnight). Also checks the tables ``read`` were read."""
    out: dict[str, set[str]] = {}
    looked = set()
    for statement, parameters in sent:
        tables = {t for t in LEDGER if f" {t} " in f" {statement} ".replace("\n", " ")}
        if not tables:
            continue
        looked |= tables
        old = set()
        for name in planned(engine, statement, parameters):
            for t in LEDGER:
                since = day - dt.timedelta(days=1) if t == "events" else day
                d = ledger.day_of_partition(t, name)
                if d is not None and d < since:
                    old.add(name)
        if old:
            out[statement] = old
    assert read <= looked, looked
    return out


def test_the_api_event_page_plans_only_the_events_day_and_later(client, engine, world, statements):
    resp = client.get(
        f"/api/v1/events/{world['event']}",
        headers={"Authorization": f"Bearer {world['operator']}"},
    )
    assert resp.status_code == 200, resp.get_json()
    body = resp.get_json()
    assert [d["public_id"] for d in body["deliveries"]] == world["deliveries"]
    assert [len(d["attempts_log"]) for d in body["deliveries"]] == [1, 1]
    assert [s["name"] for s in body["steps"]] == ["record"]
    read = {"events", "deliveries", "delivery_attempts", "steps"}
    assert older_partitions(engine, statements.sent, world["day"], read) == {}


def test_the_console_event_page_plans_only_the_events_day_and_later(
    client, engine, world, statements
):
    sign_in(client, world["operator"])
    statements.sent.clear()
    resp = client.get(f"/ui/events/{world['event']}")
    assert resp.status_code == 200
    html = resp.get_data(as_text=True)
    assert all(d in html for d in world["deliveries"])
    read = {"events", "deliveries", "delivery_attempts", "steps", "event_attempts"}
    assert older_partitions(engine, statements.sent, world["day"], read) == {}


def test_the_events_list_counts_failed_callbacks_without_older_days(engine, world, statements):
    # the list counts each row's dead callbacks from its oldest row's day on
    with engine.connect() as conn:
        newest = conn.execute(
            text("SELECT id FROM events WHERE public_id = :p"), {"p": world["event"]}
        ).scalar_one()
    statements.sent.clear()
    with engine.connect() as conn:
        assert delivery_reads.failed_callbacks(conn, [newest]) == {newest: 1}
    [(statement, parameters)] = [s for s in statements.sent if "deliveries" in s[0]]
    old = {
        n
        for n in planned(engine, statement, parameters)
        if (d := ledger.day_of_partition("deliveries", n)) is not None and d < world["day"]
    }
    assert old == set()


def test_a_webhook_id_lookup_is_an_equality_not_the_lists_scan(client, engine, world, statements):
    resp = client.get(
        f"/api/v1/deliveries/{world['deliveries'][0]}",
        headers={"Authorization": f"Bearer {world['operator']}"},
    )
    assert resp.status_code == 200 and resp.get_json()["state"] == "failed"
    detail = [s for s, _ in statements.sent if "d.public_id = " in s and "JOIN endpoints" in s]
    assert detail and not any("LIMIT" in s or "ORDER BY" in s for s in detail), detail


def test_a_tenants_dead_letters_filter_on_the_ledgers_columns(client, engine, world, statements):
    auth = {"Authorization": f"Bearer {world['operator']}"}
    resp = client.get("/api/v1/events?tenant=ta&state=quarantined", headers=auth)
    assert resp.status_code == 200
    ids = [r["public_id"] for r in resp.get_json()["items"]]
    with engine.connect() as conn:
        expected = [
            r.public_id
            for r in conn.execute(
                text(
                    "SELECT e.public_id FROM events e JOIN tenants t ON t.id = e.tenant_id"
                    " WHERE t.name = 'ta' AND e.state = 'quarantined' ORDER BY e.id DESC"
                )
            )
        ]
    assert ids == expected and ids[0] == world["event"] and world["other"] not in ids
    # the tenant by its id and the dead-letter state as a constant, so the partial
    # index (tenant_id, id) WHERE state = 'quarantined' matches, prepared or not
    [listing] = [
        s for s, _ in statements.sent if "FROM events e JOIN tenants" in s and "LIMIT" in s
    ]
    assert "e.tenant_id = %(tenant_id)s" in listing and "e.state = 'quarantined'" in listing
    assert "t.name" not in listing.split("WHERE", 1)[1]

    failed = client.get("/api/v1/deliveries?tenant=ta&state=failed", headers=auth).get_json()
    assert failed["items"][0]["public_id"] == world["deliveries"][0]
    assert failed["items"][0]["event"] == world["event"]
    assert {r["state"] for r in failed["items"]} == {"failed"}
    # the events' public ids by a list of ids: only those ids' days are planned
    [(names, values)] = [s for s in statements.sent if "id = ANY" in s[0] and "events" in s[0]]
    days = {ledger.day_of(i) for i in values["ids"]}
    assert {ledger.day_of_partition("events", n) for n in planned(engine, names, values)} == days

    nobody = client.get("/api/v1/events?tenant=nobody&state=quarantined", headers=auth)
    assert nobody.status_code == 200 and nobody.get_json()["items"] == []

    sign_in(client, world["operator"])
    html = client.get("/ui/events?tenant=ta&state=quarantined").get_data(as_text=True)
    assert world["event"] in html and world["other"] not in html
