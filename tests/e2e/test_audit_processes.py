"""The self-audit with real processes: a worker killed at the wrong moment is reported
(its lease expired and nobody reclaimed it), and runs under the suite's chaos (a worker
SIGKILLed mid-playbook, a courier killed after the endpoint's 200 and before its commit,
the broker restarted) report nothing once they have settled, however often beat's passes
looked meanwhile: no false alarms."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from inbox.domain import callbacks
from inbox.domain.invariants import Invariant
from inbox.infra.config import Settings
from inbox.services import audit
from inbox.services.runtime import Runtime
from inbox.store.write import endpoints as estore
from tests.brokers import Broker
from tests.e2e.test_worker_processes import wait_for
from tests.helpers import body_of, events_by_state, hmac_headers, sink_rows
from tests.procs import CeleryProc, Web
from tests.sink import Answer, Sink
from tests.sink_playbooks import CRASH_DIR

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("sink_table")]


@pytest.fixture
def env(database_url: str, broker: Broker) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        **broker.env,
        "INBOX_PLAYBOOKS": "tests.sink_playbooks",
        "INBOX_LEASE_SECONDS": "3",
        "INBOX_SWEEP_SECONDS": "1",
        "INBOX_RETRY_BASE_SECONDS": "0.05",
        "INBOX_ALLOW_PRIVATE_TARGETS": "1",
    }


def full_audit(database_url: str) -> dict:
    """``inbox audit --json``: every invariant, every row."""
    out = CliRunner().invoke(main, ["audit", "--json"], env={"DATABASE_URL": database_url})
    assert out.exit_code in (0, 1), out.output
    doc: dict = json.loads(out.output)
    return doc


def violated(doc: dict) -> dict[str, list]:
    return {c["invariant"]: c["violations"] for c in doc["invariants"] if c["violations"]}


def beat_audited(engine) -> bool:
    """Beat's audit task has run every invariant at least once."""
    with engine.connect() as conn:
        n = conn.execute(
            text("SELECT count(*) FROM invariant_watermarks WHERE checked_at IS NOT NULL")
        ).scalar_one()
    return int(n) >= sum(1 for i in Invariant if i.value in _WATERMARKED)


_WATERMARKED = {"event_state", "step_once", "delivery_per_endpoint", "webhook_id_one_body",
                "lane_order", "operator_audited"}  # fmt: skip


@pytest.mark.parametrize("broker_kind", ["redis"])  # the database decides; not the broker
def test_a_worker_killed_mid_playbook_is_reported_until_recovered_then_nothing(
    env, procs, make_source, engine, database_url
):
    src = make_source(event_type_path="type")
    CRASH_DIR.mkdir(parents=True, exist_ok=True)
    (CRASH_DIR / "audit1").touch()
    web = Web(env)
    procs.append(web)
    worker = CeleryProc(env)
    procs.append(worker)
    body = body_of({"type": "two.step", "crash": "audit1"})
    assert web.request("POST", src.path, body, hmac_headers("s3cret", body, "a1"))[0] == 202
    wait_for(lambda: len(sink_rows(engine)) == 1, 30, "the first charge")
    worker.stop(signal.SIGKILL)  # the lease is held by a process that is gone; no beat
    settings = Settings(database_url=database_url, sweep_seconds=1)

    def reported() -> bool:
        report = audit.run(Runtime(settings, engine), [Invariant.LEASE_RECLAIMED])
        return report.violations == 1

    wait_for(reported, 60, "the expired lease reported")
    with engine.connect() as conn:
        [(subject, rows)] = conn.execute(
            text("SELECT subject, rows FROM invariant_violations WHERE resolved_at IS NULL")
        ).all()
        pid = conn.execute(text("SELECT public_id FROM events")).scalar_one()
    assert subject == f"event:{pid}" and rows[0]["state"] == "processing"
    assert rows[0]["lease_owner"]  # the dead worker's name
    procs += [CeleryProc(env), CeleryProc(env, kind="beat")]
    wait_for(lambda: events_by_state(engine) == {"completed": 1}, 60, "completion")
    wait_for(lambda: beat_audited(engine), 60, "beat's audit passes")
    doc = full_audit(database_url)
    assert violated(doc) == {} and doc["holds"] is True
    with engine.connect() as conn:
        still = conn.execute(
            text("SELECT count(*) FROM invariant_violations WHERE resolved_at IS NULL")
        ).scalar_one()
    assert still == 0  # the lease's violation is resolved by the pass that no longer finds it


@pytest.mark.parametrize("broker_kind", ["redis"])
def test_callbacks_through_a_courier_kill_and_a_broker_restart_report_nothing(
    env, procs, make_source, engine, broker, database_url
):
    sink = Sink()
    try:
        src = make_source(playbook="forward", event_type_path="type")
        with engine.begin() as conn:
            for path in ("/a", "/b"):
                estore.create_endpoint(
                    conn, src.tenant, sink.script(path, *[Answer(200)] * 40), callbacks.new_secret()
                )
        courier = CeleryProc(env, kind="courier", concurrency=2)
        procs += [CeleryProc(env, concurrency=2), courier, CeleryProc(env, kind="beat")]
        first = threading.Event()

        def freeze_then_kill(_req) -> None:
            if first.is_set():
                return
            first.set()
            os.killpg(courier.popen.pid, signal.SIGSTOP)  # it cannot read the 200 or commit
            threading.Timer(0.5, os.killpg, (courier.popen.pid, signal.SIGKILL)).start()

        sink.on_request = freeze_then_kill
        web = Web(env)
        procs.append(web)
        for i in range(10):
            body = body_of({"type": "fraud.alert", "account": f"acct-{i}"})
            assert (
                web.request("POST", src.path, body, hmac_headers("s3cret", body, f"k{i}"))[0] == 202
            )
        wait_for(first.is_set, 60, "the first attempt")
        courier.popen.wait(10)
        broker.restart()  # while deliveries are still due
        procs.append(CeleryProc(env, kind="courier", concurrency=2))
        for i in range(10, 20):
            body = body_of({"type": "fraud.alert", "account": f"acct-{i}"})
            assert (
                web.request("POST", src.path, body, hmac_headers("s3cret", body, f"k{i}"))[0] == 202
            )

        def settled() -> bool:
            with engine.connect() as conn:
                left = conn.execute(
                    text("SELECT count(*) FROM deliveries WHERE state <> 'delivered'")
                ).scalar_one()
                made = conn.execute(text("SELECT count(*) FROM deliveries")).scalar_one()
            return made == 40 and left == 0 and events_by_state(engine) == {"completed": 20}

        wait_for(settled, 120, "every callback delivered")
        wait_for(lambda: beat_audited(engine), 60, "beat's audit passes")
        doc = full_audit(database_url)
        assert violated(doc) == {} and doc["holds"] is True
        with engine.connect() as conn:
            ever = conn.execute(text("SELECT count(*) FROM invariant_violations")).scalar_one()
            intents = conn.execute(text("SELECT count(*) FROM callback_intents")).scalar_one()
        assert ever == 0  # beat's passes during the chaos opened nothing either
        assert intents == 40
    finally:
        sink.close()
