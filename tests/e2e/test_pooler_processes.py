"""Every process behind a stock PgBouncer in transaction mode (``INBOX_DB_POOLER``).

Web, worker, courier, beat and the CLI all reach PostgreSQL through a private pgbouncer
(``dev.pgbouncer``: Debian's 1.18, no prepared-statement support, startup ``options``
refused) with ``INBOX_DB_POOLER=transaction``: a storm of copies, the drain with its
effects, a replay and the outbound path, counted in rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest
from sqlalchemy import text

from inbox.domain import callbacks
from inbox.store.write import endpoints as estore
from tests.brokers import Broker
from tests.e2e.test_storm import COPIES, KEYS, _storm
from tests.e2e.test_worker_processes import wait_for
from tests.helpers import EVENTS, body_of, hmac_headers, sink_rows
from tests.procs import ROOT, CeleryProc, Web
from tests.sink import Answer, Sink

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("sink_table")]


@pytest.fixture
def env(database_url: str, pgbouncer, broker: Broker) -> dict[str, str]:
    return {
        "DATABASE_URL": pgbouncer.url(database_url),
        "INBOX_DB_POOLER": "transaction",
        **broker.env,
        "INBOX_PLAYBOOKS": "tests.sink_playbooks",
        "INBOX_LEASE_SECONDS": "5",
        "INBOX_SWEEP_SECONDS": "1",
        "INBOX_RETRY_BASE_SECONDS": "0.05",
        "INBOX_ALLOW_PRIVATE_TARGETS": "1",
        # A starved CPU is not an unavailable database: the claims' deadline is generous
        # here, so a loaded machine slows the storm down instead of answering it 503.
        "INBOX_DB_TIMEOUT_MS": "15000",
    }


def states(engine, sources: tuple[int, ...]) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT state, count(*) FROM events WHERE source_id = ANY(:s) GROUP BY state"),
            {"s": list(sources)},
        )
        return {r[0]: int(r[1]) for r in rows}


def deliveries(engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT state FROM deliveries")).scalars())


@pytest.mark.parametrize("broker_kind", ["redis"])  # the database path is under test here
def test_every_process_works_through_pgbouncer(env, procs, make_source, engine):
    sink = Sink()
    try:
        _through_pgbouncer(env, procs, make_source, engine, sink)
    finally:
        sink.close()


def _through_pgbouncer(env, procs, make_source, engine, sink) -> None:
    stormed = make_source()
    drained = make_source(event_type_path="type")
    replayed = make_source(playbook="review", business_key_paths=["case"])
    forwarded = make_source(playbook="forward", event_type_path="type")
    with engine.begin() as conn:
        estore.create_endpoint(
            conn, forwarded.tenant, sink.script("/cb", Answer(200)), callbacks.new_secret()
        )
    web_env = {**env, "INBOX_DB_POOL_SIZE": "4", "WEB_THREADS": "32"}
    servers = [Web(web_env, workers=2), Web(web_env, workers=2)]
    procs += servers
    procs += [
        CeleryProc(env, concurrency=2),
        CeleryProc(env, kind="courier", concurrency=2),
        CeleryProc(env, kind="beat"),
    ]

    # A storm of copies across two web processes: one event per key, each copy counted.
    answers = _storm(servers, stormed.path, "pooled")
    statuses = Counter(status for _, status, _ in answers)
    assert statuses == {202: KEYS * COPIES}, statuses
    with engine.connect() as conn:
        n, dups = conn.execute(
            text(f"SELECT count(*), sum(duplicate_count) FROM ({EVENTS}) e WHERE source_id = :s"),
            {"s": stormed.id},
        ).one()
    assert (n, dups) == (KEYS, KEYS * (COPIES - 1))

    # The drain with effects: each event's effect once; a replay of a quarantined event;
    # a decision forwarded to an endpoint.
    web = servers[0]
    for i in range(20):
        body = body_of({"type": "flaky", "n": i})
        assert (
            web.request("POST", drained.path, body, hmac_headers("s3cret", body, f"d{i}"))[0] == 202
        )
    body = body_of({"case": "c1", "decision": "close", "down_until_replay": True})
    assert web.request("POST", replayed.path, body, hmac_headers("s3cret", body, "r1"))[0] == 202
    body = body_of({"type": "fraud.alert", "account": "acct-1"})
    assert web.request("POST", forwarded.path, body, hmac_headers("s3cret", body, "f1"))[0] == 202

    worked = (drained.id, replayed.id, forwarded.id)
    wait_for(
        lambda: states(engine, worked) == {"completed": 21, "quarantined": 1},
        120,
        "the drain and the quarantine",
    )
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "inbox.cli",
            "replay",
            "--quarantined",
            "--tenant",
            replayed.tenant,
            "--actor",
            "ops",
        ],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    assert "replayed 1 of 1" in cli.stdout
    wait_for(lambda: states(engine, worked) == {"completed": 22}, 120, "the replay")
    wait_for(lambda: deliveries(engine) == ["delivered"], 60, "the delivery")
    rows = sink_rows(engine)
    per_step = Counter((r.event, r.step) for r in rows)
    assert set(per_step.values()) == {1}, per_step  # no effect twice
    assert sum(1 for r in rows if r.step == "work") == 20
    assert sum(1 for r in rows if r.step == "close_task") == 1
    assert len(sink.at("/cb")) == 1
    logs = "".join(p.output() for p in procs)
    for bad in ("DuplicatePreparedStatement", "unsupported startup parameter", "QueryCanceled"):
        assert bad not in logs, logs[-4000:]
