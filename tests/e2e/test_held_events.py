"""A source whose playbook no loaded module registers: its events are held, not quarantined,
and run once a worker that has the playbook sweeps (inbox.services.drain.release_held)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.brokers import PrivateRedis
from tests.helpers import body_of, eventually, hmac_headers
from tests.procs import CeleryProc, Web

pytestmark = [pytest.mark.e2e]


def wait_for(cond: Callable[[], object], timeout: float, what: str) -> None:
    assert eventually(lambda: bool(cond()), timeout, 0.2), f"timed out waiting for {what}"


def rows(engine, source_id: int) -> list:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT public_id, state, attempts, held_reason, last_error_class FROM events"
                " WHERE source_id = :s ORDER BY id"
            ),
            {"s": source_id},
        ).fetchall()


def sweeps_done(proc: CeleryProc) -> int:
    return sum(1 for ln in proc.output().splitlines() if "inbox.sweep[" in ln and "succeeded" in ln)


def test_missing_playbook_holds_events_until_a_worker_has_it(
    database_url, private_redis: PrivateRedis, procs, make_source, engine
):
    env = {
        "DATABASE_URL": database_url,
        "REDIS_URL": private_redis.url,
        "INBOX_SWEEP_SECONDS": "1",
        "INBOX_LEASE_SECONDS": "5",
        "INBOX_PLAYBOOKS": "",
    }
    src = make_source(playbook="noop", max_attempts=1)
    web = Web(env, workers=1)
    procs.append(web)
    without = CeleryProc(env)
    procs.append(without)
    for i in range(3):
        body = body_of({"n": i})
        status, _, _ = web.request("POST", src.path, body, hmac_headers("s3cret", body, f"k{i}"))
        assert status == 202
    wait_for(lambda: all(r.held_reason for r in rows(engine, src.id)), 60, "three held events")
    # Sweeps by a process without the playbook leave them held; nothing is spent.
    procs.append(CeleryProc(env, kind="beat"))
    wait_for(lambda: sweeps_done(without) >= 3, 60, "three sweeps")
    held = rows(engine, src.id)
    assert len(held) == 3
    for r in held:
        assert (r.state, r.attempts, r.last_error_class) == ("received", 0, "PlaybookMissing")
        assert "'noop'" in r.held_reason and "INBOX_PLAYBOOKS" in r.held_reason
    # Ready (events are accepted and held), and /readyz names the source and the playbook.
    status, _, raw = web.request("GET", "/readyz")
    doc = json.loads(raw)
    assert status == 200, doc
    assert f"{src.tenant}/{src.name} names 'noop'" in doc["checks"]["playbooks"]
    assert "event" in without.output() and "held" in without.output()
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "inbox"), "events", "show", held[0].public_id],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DATABASE_URL": database_url},
    )
    assert shown.returncode == 0, shown.stderr
    assert "held until its playbook is registered" in shown.stdout
    assert "no playbook named 'noop'" in shown.stdout
    # A worker that has the playbook: its sweep releases them, and they complete.
    without.stop()
    procs.append(CeleryProc({**env, "INBOX_PLAYBOOKS": "tests.sink_playbooks"}))
    wait_for(lambda: [r.state for r in rows(engine, src.id)] == ["completed"] * 3, 90, "completion")
    for r in rows(engine, src.id):
        assert r.attempts == 1 and r.held_reason is None and r.last_error_class is None
    with engine.connect() as conn:
        quarantined = conn.execute(
            text("SELECT count(*) FROM event_attempts WHERE outcome = 'quarantined'")
        ).scalar_one()
    assert quarantined == 0
    for p in reversed(procs):  # gently, so no backend is left mid-statement at the teardown
        p.stop()
