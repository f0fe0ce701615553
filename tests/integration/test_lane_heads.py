"""The claim reads each ordered lane's head alone (migration 0031): an event that arrives
behind an unfinished event of its lane, or behind its lane's blocker, is stored parked (not
due); the commit that finishes its predecessor (or skips the blocker) makes it due. The
sweep counts only what the claim would take, and repairs (loudly) a parked event that has
nothing before it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from sqlalchemy import Engine, text

import tests.sink_playbooks  # noqa: F401  (registers the test playbooks)
from inbox.domain.lanes import PARKED_UNTIL
from inbox.infra.config import Settings
from inbox.services import operations, sweep
from inbox.services.drain import drain_once
from inbox.services.operations import Actor
from inbox.services.runtime import Bells, Runtime
from inbox.store.db.days import open_days
from inbox.store.write import queue
from tests.helpers import body_of, hmac_headers

pytestmark = pytest.mark.usefixtures("sink_table")


@pytest.fixture
def one(settings: Settings) -> Settings:
    """One event per claim: each drain_once runs exactly one lane step."""
    return dataclasses.replace(settings, batch_size=1, lease_seconds=30, retry_base_seconds=0.01)


def send(client, src, lane: str, n: int, **payload: Any) -> str:
    body = body_of({"type": "lane", "account": lane, "n": n, **payload})
    resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, f"{lane}-{n}"))
    assert resp.status_code == 202, resp.data
    return str(resp.json["id"])


def parked(engine: Engine) -> dict[str, bool]:
    """Each event's public id: parked or not."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT public_id, available_at = CAST(:p AS timestamptz) FROM events"),
            {"p": PARKED_UNTIL},
        ).all()
    return {r[0]: bool(r[1]) for r in rows}


@pytest.fixture
def ordered(make_source):
    return make_source(
        playbook="lane", business_key_paths=["account"], serialize_by_business_key=True
    )


def test_events_behind_an_unfinished_one_are_parked_and_its_commit_unparks_the_next(
    client, ordered, engine, one
):
    a = [send(client, ordered, "a", n, ms=1) for n in range(3)]
    b = send(client, ordered, "b", 0, ms=1)
    assert parked(engine) == {a[0]: False, a[1]: True, a[2]: True, b: False}
    with engine.begin() as conn:
        assert queue.due_count(conn) == 2  # the heads of a and b

    assert drain_once(Runtime(one, engine)).claimed == 1  # a0 (the oldest head)
    now = parked(engine)
    assert (now[a[1]], now[a[2]]) == (False, True)  # a0's commit made a1 due, a1 only
    while drain_once(Runtime(one, engine)).claimed:
        pass
    with engine.connect() as conn:
        done = conn.execute(text("SELECT count(*) FROM events WHERE state = 'completed'"))
        assert done.scalar_one() == 4


def test_events_behind_a_blocker_are_parked_not_due_and_a_skip_unparks_the_next(
    client, ordered, engine, one, settings
):
    a0 = send(client, ordered, "a", 0, ms=1, poison=True)
    while drain_once(Runtime(one, engine)).claimed:
        pass
    a1, a2 = send(client, ordered, "a", 1, ms=1), send(client, ordered, "a", 2, ms=1)
    assert parked(engine)[a1] and parked(engine)[a2]
    swept = sweep.run_once(Runtime(one, engine), horizon=60, slot=1)
    assert swept.due == 0 and not swept.drain_now  # nothing the claim would take

    rt = Runtime(settings, engine, Bells(doorbell=lambda: None))
    done = operations.skip_lane(rt, Actor("alice", None), a0, "bad data, reissued")
    assert done.status == "skipped"
    assert (parked(engine)[a1], parked(engine)[a2]) == (False, True)


def test_the_sweep_counts_no_event_held_behind_its_lane_as_due(client, ordered, engine, one):
    send(client, ordered, "a", 0, ms=1, poison=True)
    while drain_once(Runtime(one, engine)).claimed:
        pass
    send(client, ordered, "a", 1, ms=1)
    with engine.begin() as conn:  # as an event stored before parking was (or not parked)
        conn.execute(text("UPDATE events SET available_at = now() WHERE state = 'received'"))
    swept = sweep.run_once(Runtime(one, engine), horizon=60, slot=1)
    assert (swept.due, swept.drain_now) == (0, False)
    assert drain_once(Runtime(one, engine)).claimed == 0


def test_a_parked_event_with_nothing_before_it_is_made_due_by_the_sweep(
    client, ordered, engine, one, caplog
):
    a0 = send(client, ordered, "a", 0, ms=1)
    with engine.begin() as conn:  # a broken promise: parked, though first in its lane
        conn.execute(
            text("UPDATE events SET available_at = CAST(:p AS timestamptz)"),
            {"p": PARKED_UNTIL},
        )
    assert drain_once(Runtime(one, engine)).claimed == 0
    swept = sweep.run_once(Runtime(one, engine), horizon=60, slot=1)
    assert swept.unparked == 1 and swept.drain_now
    assert "parked events had nothing before them" in caplog.text
    assert not parked(engine)[a0]
    assert drain_once(Runtime(one, engine)).claimed == 1


def _plan_rows(node: dict[str, Any]) -> int:
    """Rows read from events (index or heap) in a plan, over all loops."""
    here = 0
    if str(node.get("Relation Name", "")).startswith("events"):
        loops = int(node.get("Actual Loops", 1))
        read = int(node.get("Actual Rows", 0)) + int(node.get("Rows Removed by Filter", 0))
        here = read * loops
    return here + sum(_plan_rows(c) for c in node.get("Plans", []))


def _claim_plan(engine: Engine) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the claim (rolled back), its top node."""
    with engine.begin() as conn:
        lo, hi = open_days(conn)
        sql = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queue._CLAIM.over(lo, hi).text
        params = {"owner": "w", "limit": 10, "per_tenant": 10, "lease": 30, "capped": []}
        plan = conn.execute(text(sql), params).scalar_one()
        conn.rollback()
    doc = plan if isinstance(plan, list) else json.loads(plan)
    return dict(doc[0]["Plan"])


def test_the_claim_reads_each_lanes_head_alone_however_deep_the_lanes(ordered, engine):
    """10 lanes of 2,000 events, as a flood leaves them: statistics taken while all were
    waiting, then the first 1,000 of each lane finished; each lane's head is due, the rest
    parked. The claim reads the 10 heads and one index probe each (EXPLAIN ANALYZE), not
    the 10,000 finished events before them (the primary key's walk), nor
    the 9,990 parked ones."""
    with engine.begin() as conn:
        conn.execute(
            text(
                """
                INSERT INTO events (id, public_id, tenant_id, source_id, content_type,
                       body_sha256, response_status, response_body, ordering_key,
                       available_at)
                SELECT inbox_ledger_id('events_id_seq'), 'evt_x' || g, :t, :s,
                       'application/json', '\\x00', 202, '', convert_to('k' || (g % 10), 'UTF8'),
                       CASE WHEN g < 10010 THEN now() ELSE CAST(:p AS timestamptz) END
                  FROM generate_series(0, 19999) g
                """
            ),
            {"t": ordered.tenant_id, "s": ordered.id, "p": PARKED_UNTIL},
        )
        conn.execute(text("ANALYZE events"))
    with engine.begin() as conn:
        # Finished in bulk here, with the triggers off (the heads are made due above).
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(
            text(
                "UPDATE events SET state = 'completed', finished_at = now()"
                " WHERE id IN (SELECT id FROM events ORDER BY id LIMIT 10000)"
            )
        )
        done = conn.execute(text("SELECT count(*) FROM events WHERE state = 'completed'"))
        assert done.scalar_one() == 10_000
    plan = _claim_plan(engine)
    assert plan["Actual Rows"] == 10  # the ten heads
    assert _plan_rows(plan) <= 40  # each head, its one probe, its update
    assert not _walks_the_primary_key(plan)
    unvacuumed = plan["Shared Hit Blocks"]
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM events"))
    plan = _claim_plan(engine)
    print(f"claim: {unvacuumed} buffers before VACUUM, {plan['Shared Hit Blocks']} after")
    assert plan["Shared Hit Blocks"] < 1500  # the primary key's walk: ~94,000


def _walks_the_primary_key(node: dict[str, Any]) -> bool:
    """An index scan of events by its primary key with a filter (the walk)."""
    name = str(node.get("Index Name", ""))
    if name.endswith("_pkey") and "Filter" in node:
        return True
    return any(_walks_the_primary_key(c) for c in node.get("Plans", []))


def _lane_probes(node: dict[str, Any]) -> list[tuple[int, int]]:
    """(index pages read, loops) of each scan of the lane index in a plan."""
    here = []
    if str(node.get("Index Name", "")).endswith("_ordering_key_lane_position_id_idx"):
        here.append((int(node["Shared Hit Blocks"]), int(node.get("Actual Loops", 1))))
    return here + [p for c in node.get("Plans", []) for p in _lane_probes(c)]


def test_the_lane_probe_reads_its_own_lane_not_the_lanes_before_it(ordered, engine):
    """2,000 lanes of 4 events (the first of each finished, the second due, the rest
    parked): each head's probe for an earlier unfinished event starts at its own lane's
    entries and reads a few pages of the lane index, however many lanes sort before it.
    (Written with the lane inside a four-column row comparison, PostgreSQL started every
    probe at the tenant's first entry: ~58 pages each here, the ordered drain at 0.45x.)
    The advance after those heads finish reads each lane's next entry as directly."""
    with engine.begin() as conn:
        conn.execute(
            text(
                """
                INSERT INTO events (id, public_id, tenant_id, source_id, content_type,
                       body_sha256, response_status, response_body, ordering_key,
                       available_at)
                SELECT inbox_ledger_id('events_id_seq'), 'evt_l' || g, :t, :s,
                       'application/json', '\\x00', 202, '',
                       sha256(convert_to('k' || (g % 2000), 'UTF8')),
                       CASE WHEN g < 4000 THEN now() ELSE CAST(:p AS timestamptz) END
                  FROM generate_series(0, 7999) g ORDER BY g
                """
            ),
            {"t": ordered.tenant_id, "s": ordered.id, "p": PARKED_UNTIL},
        )
        conn.execute(text("SET LOCAL session_replication_role = replica"))  # no triggers
        conn.execute(
            text(
                "UPDATE events SET state = 'completed', finished_at = now()"
                " WHERE id IN (SELECT id FROM events ORDER BY id LIMIT 2000)"
            )
        )
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE events"))
    plan = _claim_plan(engine)
    assert plan["Actual Rows"] == 10  # ten heads
    probes = [p for p in _lane_probes(plan) if p[1]]
    assert probes  # the claim asked the lane index
    for pages, loops in probes:
        assert pages / loops <= 6, probes  # the old form: ~58 each
    with engine.begin() as conn:  # the advance of those ten lanes reads as little
        ids = [r[0] for r in conn.execute(text("SELECT id FROM events ORDER BY id LIMIT 10"))]
        tomorrow = open_days(conn)[1]
        advance = queue._ADVANCE.over(ids[0], tomorrow).text
        doc = conn.execute(text("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + advance), {"ids": ids})
        doc = doc.scalar_one()
        conn.rollback()
    doc = doc if isinstance(doc, list) else json.loads(doc)
    probes = [p for p in _lane_probes(doc[0]["Plan"]) if p[1]]
    assert probes
    for pages, loops in probes:
        assert pages / loops <= 10, probes  # with its heap fetches: ~5 each
