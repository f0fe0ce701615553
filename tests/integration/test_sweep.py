"""The sweep as a plain function (``inbox.services.sweep``): what it puts back and what it
hands its shell to ring; the Celery task (tests/integration/test_tasks.py) only rings it."""

from __future__ import annotations

import dataclasses

from sqlalchemy import text

from inbox.services import replays, sweep
from inbox.services.bulk import parse_request
from inbox.services.operations import Actor
from inbox.services.runtime import Runtime
from inbox.store.write import queue
from tests.helpers import leases_expired, wait_for
from tests.integration.test_api import quarantine


def test_a_sweep_requeues_an_expired_lease_and_says_what_to_ring(engine, make_source, settings):
    src = make_source(tenant="ops", name="billing")
    quarantine(engine, src, 1, "evt_lost", state="received")
    with engine.begin() as conn:
        [claim] = queue.claim(conn, "a-dead-worker", 10, 0.05)
    wait_for(lambda: leases_expired(engine))
    rt = Runtime(dataclasses.replace(settings, bulk_approval_min=100), engine)
    quarantine(engine, src, 2, "evt_dead")
    job, _ = replays.start(rt, Actor("alice"), parse_request({"kind": "events"}))
    assert job.status == "queued"  # no runner was rung: the sweep hands it on

    swept = sweep.run_once(Runtime(settings, engine), horizon=60, slot=1)

    assert (swept.requeued, swept.quarantined, swept.due) == (1, 0, 1)
    assert swept.drain_now and swept.jobs == [job.id] and swept.endpoints == set()
    assert swept.counts() == {
        "requeued": 1,
        "quarantined": 0,
        "due": 1,
        "released": 0,
        "unparked": 0,
    }
    with engine.connect() as conn:
        state, fence = conn.execute(
            text("SELECT state, fence FROM events WHERE id = :id"), {"id": claim.id}
        ).one()
    assert (state, fence) == ("received", 1)


def test_a_quiet_sweep_rings_nothing(engine, settings):
    swept = sweep.run_once(Runtime(settings, engine), horizon=60, slot=1)
    assert not swept.drain_now
    assert (swept.jobs, swept.endpoints, swept.drain_alarms, swept.deliver_alarms) == (
        [],
        set(),
        [],
        [],
    )
