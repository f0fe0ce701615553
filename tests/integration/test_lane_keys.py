"""An ordered source's lane key from JSON paths over the body and headers, or from a CEL
expression over both; set through the sources CLI (and so the API's options) like the
lane option itself; refused when it cannot work; an event without one has no lane."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text

import tests.sink_playbooks  # noqa: F401  (registers the test playbooks)
from inbox.cli import main
from inbox.domain.errors import BadRequest
from inbox.domain.lanes import PARKED_UNTIL
from inbox.domain.sources import SourceOptions
from inbox.infra.config import Settings
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from tests.helpers import body_of, hmac_headers, sink_rows
from tests.lane_effects import judge

pytestmark = pytest.mark.usefixtures("sink_table")


def send(client, src, account: str, n: int, shop: str | None = None, **payload: Any) -> str:
    body = body_of({"type": "lane", "account": account, "n": n, "ms": 1, **payload})
    extra = {} if shop is None else {"X-Shop": shop}
    headers = hmac_headers("s3cret", body, f"{account}-{n}-{shop}", **extra)
    resp = client.post(src.path, data=body, headers=headers)
    assert resp.status_code == 202, resp.data
    return str(resp.json["id"])


def lanes(engine: Engine) -> dict[str, tuple[bytes | None, bool]]:
    """Each event: its lane and whether it is parked."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT public_id, ordering_key, available_at = CAST(:p AS timestamptz) FROM events"
            ),
            {"p": PARKED_UNTIL},
        ).all()
    return {r[0]: (None if r[1] is None else bytes(r[1]), bool(r[2])) for r in rows}


def test_a_header_path_names_the_lane_across_business_keys(client, make_source, engine):
    src = make_source(
        playbook="lane",
        business_key_paths=["account"],
        serialize_by_business_key=True,
        lane_key_paths=["headers.x-shop"],
    )
    a = send(client, src, "a", 0, shop="s1")
    b = send(client, src, "b", 1, shop="s1")  # another business key, the same shop: behind a
    c = send(client, src, "c", 2, shop="s2")
    none = send(client, src, "d", 3)  # no X-Shop: no lane
    got = lanes(engine)
    assert got[a][0] == got[b][0] and got[a][0] != got[c][0]
    assert (got[a][1], got[b][1], got[c][1]) == (False, True, False)
    assert got[none] == (None, False)


def test_a_cel_expression_names_the_lane(client, make_source, engine):
    src = make_source(
        playbook="lane",
        serialize_by_business_key=True,
        lane_key='headers["x-shop"] + "/" + body.account',
    )
    a0 = send(client, src, "a", 0, shop="s1")
    a1 = send(client, src, "a", 1, shop="s1")
    other = send(client, src, "a", 2, shop="s2")
    broken = send(client, src, "a", 3)  # the expression fails without the header: no lane
    got = lanes(engine)
    assert got[a0][0] == got[a1][0] and got[a1][1]
    assert got[other][0] not in (None, got[a0][0])
    assert got[broken] == (None, False)


def test_events_of_one_lane_key_run_in_order_across_business_keys(
    client, make_source, engine, settings: Settings
):
    src = make_source(
        playbook="lane",
        business_key_paths=["account"],
        serialize_by_business_key=True,
        lane_key_paths=["headers.x-shop"],
    )
    position = {send(client, src, f"acct{n}", n, shop="s1"): ("s1", n) for n in range(6)}
    one = dataclasses.replace(settings, batch_size=10, lease_seconds=30)
    while drain_once(Runtime(one, engine)).claimed:
        pass
    v = judge(sink_rows(engine), position)
    assert (v.overlaps, v.out_of_order) == (0, 0)
    assert v.ends["s1"] == list(range(6))


@pytest.mark.parametrize(
    "options, problem",
    [
        (
            {"lane_key": "body.x", "serialize_by_business_key": True, "lane_key_paths": ["a"]},
            "not both",
        ),
        ({"lane_key": "body.x"}, "need serialize_by_business_key"),
        ({"lane_key": "body.(", "serialize_by_business_key": True}, "Invalid lane_key"),
        ({"lane_key": "secrets.x", "serialize_by_business_key": True}, "unknown variable"),
    ],
)
def test_a_lane_key_that_cannot_work_is_refused(options, problem):
    with pytest.raises(BadRequest) as err:
        SourceOptions.from_dict(options)
    assert problem in str(err.value)


def test_the_sources_cli_sets_a_lane_key(make_source, engine):
    make_source(tenant="acme", name="shop")
    runner = CliRunner()
    out = runner.invoke(
        main,
        [
            "sources",
            "update",
            "acme/shop",
            "--option",
            "serialize_by_business_key=true",
            "--option",
            'lane_key=headers["x-shop"]',
        ],
    )
    assert out.exit_code == 0, out.output
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT options->>'lane_key' FROM sources")).scalar_one()
    assert stored == 'headers["x-shop"]'
    bad = runner.invoke(main, ["sources", "update", "acme/shop", "--option", "lane_key=body.("])
    assert bad.exit_code != 0 and "lane_key" in bad.output


def outcomes(engine: Engine) -> dict[str, str | None]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT public_id, outcome FROM events")).all())


@pytest.fixture
def by_time(make_source):
    """Ordered by the provider's time: ``at`` in the body (the stale guard's position)."""
    return make_source(
        playbook="lane",
        business_key_paths=["account"],
        serialize_by_business_key=True,
        occurred_at_path="at",
    )


def test_events_arriving_out_of_time_order_run_in_time_order(
    client, by_time, engine, settings: Settings
):
    sent = {t: send(client, by_time, "a", t, at=t) for t in (10, 30, 20, 40)}
    batch = dataclasses.replace(settings, batch_size=10, lease_seconds=30)
    while drain_once(Runtime(batch, engine)).claimed:
        pass
    position = {p: ("a", t) for t, p in sent.items()}
    v = judge(sink_rows(engine), position)
    assert (v.overlaps, v.out_of_order) == (0, 0)
    assert v.starts["a"] == [10, 20, 30, 40]
    assert set(outcomes(engine).values()) == {"completed"}


def test_an_event_late_for_a_position_already_passed_goes_to_the_stale_guard(
    client, by_time, engine, settings: Settings
):
    batch = dataclasses.replace(settings, batch_size=10, lease_seconds=30)
    first = send(client, by_time, "a", 20, at=20)
    while drain_once(Runtime(batch, engine)).claimed:
        pass
    late = send(client, by_time, "a", 10, at=10)  # its successor ran already
    while drain_once(Runtime(batch, engine)).claimed:
        pass
    got = outcomes(engine)
    assert (got[first], got[late]) == ("completed", "stale")


def test_a_late_event_waits_for_the_running_one_even_when_its_position_is_earlier(
    client, by_time, engine, settings: Settings
):
    from inbox.store.write import queue

    running = send(client, by_time, "a", 20, at=20)
    with engine.begin() as conn:
        [claim] = queue.claim(conn, "other-worker", 10, 30)  # runs elsewhere, not finished
    late = send(client, by_time, "a", 10, at=10)
    batch = dataclasses.replace(settings, batch_size=10, lease_seconds=30)
    assert drain_once(Runtime(batch, engine)).claimed == 0  # not beside the running one
    with engine.begin() as conn:  # finished by hand (no stale record): then the late one runs
        queue.complete(conn, claim, "completed", {}, None, None)
    assert drain_once(Runtime(batch, engine)).claimed == 1
    assert outcomes(engine)[running] == "completed" and outcomes(engine)[late] is not None


def test_a_replay_of_one_event_waits_for_its_lanes_unfinished_predecessors(
    client, make_source, engine, settings: Settings
):
    from inbox.services import operations
    from inbox.services.operations import Actor
    from inbox.services.runtime import Bells, Runtime

    src = make_source(
        playbook="lane",
        business_key_paths=["account"],
        serialize_by_business_key=True,
        filter="body.n != 1",
    )
    e0 = send(client, src, "a", 0)  # waits (not drained yet)
    e1 = send(client, src, "a", 1)  # filtered: finished at once, behind nothing
    rt = Runtime(settings, engine, Bells(doorbell=lambda: None))
    operations.replay_event(rt, Actor("alice", None), e1)
    batch = dataclasses.replace(settings, batch_size=10, lease_seconds=30)
    first = drain_once(Runtime(batch, engine))
    assert first.claimed == 1  # e0 alone: the replayed e1 waits behind it
    while drain_once(Runtime(batch, engine)).claimed:
        pass
    v = judge(sink_rows(engine), {e0: ("a", 0), e1: ("a", 1)})
    assert v.starts["a"] == [0, 1] and v.overlaps == 0


def test_an_event_without_the_providers_time_stands_at_its_receipt(client, by_time, engine):
    timed = send(client, by_time, "a", 0, at=1000)
    untimed = send(client, by_time, "a", 1)
    with engine.connect() as conn:
        rows = dict(
            conn.execute(
                text(
                    "SELECT public_id, lane_position - extract(epoch FROM received_at) FROM events"
                )
            ).all()
        )
    assert abs(float(rows[untimed])) < 5  # its receipt time, give or take the clocks
    assert float(rows[timed]) < -1_000_000  # 1970 plus 1,000 s, far before its receipt


def test_a_lane_key_that_is_not_text_or_a_number_gives_no_lane(client, make_source, engine):
    src = make_source(playbook="lane", serialize_by_business_key=True, lane_key="body.meta")
    body = body_of({"type": "lane", "account": "a", "n": 0, "ms": 1, "meta": {"x": 1}})
    resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "m-0"))
    assert resp.status_code == 202
    assert lanes(engine)[resp.json["id"]] == (None, False)
