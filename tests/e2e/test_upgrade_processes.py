"""A worker stopped for an upgrade (docs/how-to/upgrade.md): SIGTERM to its main process,
as systemd's ``KillMode=mixed`` sends it, is Celery's warm shutdown. The step that is
running finishes and commits, and the process exits; no other process is there to finish
the event, so its completion is the stopped worker's own."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from sqlalchemy import text

from tests import helpers
from tests.brokers import Broker
from tests.helpers import body_of, events_by_state, hmac_headers, sink_rows
from tests.procs import CeleryProc, Web

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("sink_table")]


@pytest.fixture
def env(database_url: str, broker: Broker) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        **broker.env,
        "INBOX_PLAYBOOKS": "tests.sink_playbooks",
        "INBOX_LEASE_SECONDS": "3",  # shorter than the step: its heartbeat keeps the lease
    }


def test_sigterm_lets_the_running_step_finish_and_commit(env, procs, make_source, engine):
    src = make_source(event_type_path="type")
    web = Web(env)
    procs.append(web)
    worker = CeleryProc(env)
    procs.append(worker)
    body = body_of({"type": "flaky", "sleep": 5})
    status, _, _ = web.request("POST", src.path, body, hmac_headers("s3cret", body, "warm"))
    assert status == 202
    helpers.wait_for(lambda: len(sink_rows(engine)) == 1, 60, "the step to start", interval=0.1)
    os.kill(worker.popen.pid, signal.SIGTERM)  # the main process only, as systemd does
    try:
        code = worker.popen.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker did not stop:\n{worker.output()}")
    assert code == 0, worker.output()
    assert events_by_state(engine) == {"completed": 1}, worker.output()
    assert len(sink_rows(engine)) == 1  # the step ran once
    with engine.connect() as conn:
        assert conn.execute(text("SELECT attempts FROM events")).scalar_one() == 1
