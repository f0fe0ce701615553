"""A real worker's pool process runs steps with the collector on and its start frozen
(inbox.infra.gc_start)."""

from __future__ import annotations

import pytest

from tests.e2e.test_worker_processes import wait_for
from tests.helpers import insert_pending, sink_rows
from tests.procs import CeleryProc


@pytest.mark.e2e
@pytest.mark.usefixtures("sink_table")
def test_a_worker_runs_playbooks_with_the_collector_on_and_its_start_frozen(
    database_url, redis_url, procs, make_source, engine
) -> None:
    """The pool process a step runs in was forked after ``worker_init``: it inherits the
    collector on and the start's objects frozen."""
    env = {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "INBOX_PLAYBOOKS": "tests.sink_playbooks",
    }
    src = make_source(event_type_path="type")
    insert_pending(engine, src, 1, {"type": "gc.state"})
    # Prefork, as the Procfile's worker; its ring at start drains the event (no beat).
    procs.append(CeleryProc(env))
    wait_for(lambda: len(sink_rows(engine)) == 1, 60, "the step")
    assert sink_rows(engine)[0].step == "collector on, start frozen"
