"""Ordered delivery per endpoint: at most one delivery in flight, and the next only once the
previous is delivered or dead, in the order made, whichever courier claims. Against a real
sink, counted by webhook-id in arrival order."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from inbox.services.courier import deliver_once
from inbox.store.write import deliveries as dstore
from tests.helpers import wait_for
from tests.integration.test_circuit_breaker import endpoint, enqueue, row
from tests.sink import Answer


@pytest.fixture
def tenant(make_source):
    return make_source()


def test_an_ordered_endpoint_has_one_claim_at_a_time_and_a_retry_blocks_the_rest(
    engine, sink, tenant
):
    url = sink.script("/o", Answer(200), Answer(503), Answer(200))
    ep = endpoint(engine, tenant, url, ordered=True, max_in_flight=4, retry_schedule=[1])
    ids = enqueue(engine, tenant, 5)
    with engine.begin() as conn:
        run = dstore.claim(conn, ep.id, "courier-a", 50, 30)
    with engine.begin() as conn:
        assert dstore.claim(conn, ep.id, "courier-b", 50, 30) == []  # the head is in flight
    assert [c.public_id for c in run] == ids  # one run, sent one after another
    with engine.begin() as conn:
        dstore.release(conn, run, 0.0)

    first = deliver_once(engine, ep.id, allow_private=True)
    # The first delivered, the second answered 503: the rest handed back unattempted.
    assert (first.delivered, first.retried, first.released) == (1, 1, 3)
    # Three are due now, but the second waits for its retry: nothing goes before it.
    assert deliver_once(engine, ep.id, allow_private=True).claimed == 0
    wait_for(
        lambda: (
            deliver_once(engine, ep.id, allow_private=True),
            row(engine, "SELECT count(*) FROM deliveries WHERE state = 'delivered'")[0] == 5,
        )[1],
        30,
        "the rest, in order",
    )
    got = [r.headers["webhook-id"] for r in sink.at("/o")]
    assert got == [ids[0], ids[1], ids[1], *ids[2:]]


def test_a_dead_letter_lets_the_next_go(engine, sink, tenant):
    url = sink.script("/d", Answer(400), Answer(200))  # a 400 is not retried: dead
    ep = endpoint(engine, tenant, url, ordered=True)
    ids = enqueue(engine, tenant, 3)
    done = deliver_once(engine, ep.id, allow_private=True)
    assert (done.failed, done.delivered) == (1, 2)
    assert [r.headers["webhook-id"] for r in sink.at("/d")] == ids


def test_ordered_is_set_from_the_cli_and_the_api_and_audited(client, engine, tenant):
    from tests.integration.test_api import make_token

    ep = endpoint(engine, tenant, "http://127.0.0.1:9/x")
    got = CliRunner().invoke(main, ["endpoints", "order", ep.public_id, "--on", "--actor", "a"])
    assert got.exit_code == 0 and "ordered: one in flight" in got.output
    assert row(engine, "SELECT ordered FROM endpoints WHERE id = :e", e=ep.id)[0] is True
    ops = make_token(engine, "ops", "operator")
    url = f"/api/v1/endpoints/{ep.public_id}/order"
    assert client.post(url, json={"ordered": "yes"}, headers=ops).status_code == 400
    off = client.post(url, json={"ordered": False}, headers=ops)
    assert off.status_code == 200 and off.get_json()["ordered"] is False
    with engine.connect() as conn:
        actions = conn.execute(
            text(
                "SELECT actor, action FROM audit_log WHERE subject_kind = 'endpoint'"
                " AND subject_id = :e ORDER BY id"
            ),
            {"e": ep.id},
        ).all()
    assert [tuple(a) for a in actions] == [("a", "order"), ("ops", "unorder")]
