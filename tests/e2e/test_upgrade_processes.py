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
from tests.procs import BIN, CeleryProc, Web

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


def stop_main(proc: CeleryProc) -> None:
    """SIGTERM to the main process only, as systemd's ``KillMode=mixed`` sends it."""
    os.kill(proc.popen.pid, signal.SIGTERM)
    try:
        assert proc.popen.wait(60) == 0, proc.output()
    except subprocess.TimeoutExpired:
        pytest.fail(f"{proc.name} did not stop:\n{proc.output()}")


def test_the_pages_order_loses_nothing_and_runs_each_event_once(env, procs, make_source, engine):
    """The order of docs/how-to/upgrade.md with one version's processes: stop the beat
    and worker (warm), receive while they are stopped, migrate, restart web, start them
    again. Every event answered 202 completes, each step once."""
    env = {**env, "INBOX_SWEEP_SECONDS": "1"}
    src = make_source(event_type_path="type")
    web = Web(env)
    procs.append(web)
    worker, beat = CeleryProc(env), CeleryProc(env, kind="beat")
    procs += [worker, beat]

    def send(n: int) -> None:
        body = body_of({"type": "flaky", "n": n, "sleep": 2 if n == 0 else 0})
        status, _, _ = web.request("POST", src.path, body, hmac_headers("s3cret", body, f"k{n}"))
        assert status == 202

    send(0)
    helpers.wait_for(lambda: len(sink_rows(engine)) == 1, 60, "the first step", interval=0.1)
    # 1. stop the beat, the worker (warm: the running step finishes). The beat first
    # says it started: until its service starts it has no SIGTERM handler of its own
    # (celery's beat installs it just before), and the worker can finish the first step
    # before a loaded machine gets the beat that far.
    helpers.wait_for(lambda: "beat: Starting" in beat.output(), 60, "the beat", interval=0.1)
    stop_main(beat)
    stop_main(worker)
    assert events_by_state(engine) == {"completed": 1}
    # the receiver goes on: events wait, received
    for n in range(1, 6):
        send(n)
    assert events_by_state(engine) == {"completed": 1, "received": 5}
    # 2. inbox migrate (at head already: nothing to do, and it says so)
    done = subprocess.run(
        [str(BIN / "inbox"), "migrate"], env={**os.environ, **env},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("migrated to head ("), done.stderr
    # 3. restart web: ready at once
    web.stop()
    web = Web(env)
    procs.append(web)
    status, _, ready = web.request("GET", "/readyz")
    assert status == 200, ready
    # 4. start the worker and the beat: what waited runs, each step once
    procs += [CeleryProc(env), CeleryProc(env, kind="beat")]
    helpers.wait_for(
        lambda: events_by_state(engine) == {"completed": 6}, 60, "six completions", interval=0.2
    )
    assert len(sink_rows(engine)) == 6
