"""``/metrics`` and ``/readyz`` through the real Flask app against real PostgreSQL and Redis.

Counters are process-wide, so every test uses its own fresh tenants and asserts the
exact values of their label sets.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, text

from inbox.infra import config, metrics
from inbox.infra.config import Settings
from inbox.store.db.engine import make_engine
from inbox.store.write import endpoints as estore
from tests.helpers import body_of, hmac_headers
from web import create_app, serve
from web.metrics import metrics_bp

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret"


@pytest.fixture
def mclient(app: Flask) -> FlaskClient:
    with_metrics(app)
    return app.test_client()


def with_metrics(app: Flask) -> Flask:
    """Register ``/metrics`` unless create_app already did."""
    if "metrics" not in app.blueprints:
        app.register_blueprint(metrics_bp)
    return app


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(body: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def scrape(client: FlaskClient) -> Samples:
    resp = client.get("/metrics")
    assert resp.status_code == 200
    assert resp.content_type.startswith("text/plain")
    return parse(resp.get_data(as_text=True))


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def post(client: FlaskClient, src, payload, key: str) -> int:
    body = body_of(payload)
    return client.post(src.path, data=body, headers=hmac_headers(SECRET, body, key)).status_code


def test_a_scripted_run_is_counted_exactly_per_tenant_and_source(mclient, make_source):
    a, b = make_source(), make_source()
    # a: 3 accepted, 4 duplicates, 2 conflicts; b: 1 accepted, 1 duplicate.
    statuses = [post(mclient, a, {"n": i}, f"k{i}") for i in range(3)]
    statuses += [post(mclient, a, {"n": i}, f"k{i}") for i in (0, 0, 1, 2)]
    statuses += [post(mclient, a, {"n": 99}, "k2") for _ in range(2)]
    statuses += [post(mclient, b, {"n": 0}, "k0") for _ in range(2)]
    assert statuses == [202] * 3 + [202] * 4 + [422] * 2 + [202] * 2

    # What the runner, the courier and a reconciliation run record.
    ta, sa = a.tenant, a.name
    metrics.record_completed(ta, sa, 0.02, "completed")
    metrics.record_completed(ta, sa, 0.015, "completed")
    metrics.record_completed(ta, sa, 400.0, "quarantined")
    metrics.record_completed(ta, sa, 1.0, "received")
    metrics.record_completed(ta, sa, 1.0, "lost")
    metrics.record_ingest(ta, sa, "in_flight")
    metrics.record_ingest(ta, sa, "no-such-outcome")
    for outcome in ("delivered", "delivered", "retried", "blocked", "failed", "surprise"):
        metrics.record_delivery_attempt(ta, outcome)
    metrics.record_reconcile(ta, sa, missing=2, extra=1)
    metrics.record_reconcile(ta, sa, missing=1, extra=0)

    m = scrape(mclient)
    ts_a, ts_b = {"tenant": ta, "source": sa}, {"tenant": b.tenant, "source": b.name}
    assert value(m, "inbox_events_accepted_total", **ts_a) == 3
    assert value(m, "inbox_duplicate_deliveries_total", **ts_a) == 4
    assert value(m, "inbox_idempotency_conflicts_total", **ts_a) == 2
    assert value(m, "inbox_in_flight_retries_total", **ts_a) == 1
    assert value(m, "inbox_events_accepted_total", **ts_b) == 1
    assert value(m, "inbox_duplicate_deliveries_total", **ts_b) == 1
    assert value(m, "inbox_idempotency_conflicts_total", **ts_b) is None
    # The unique-event replay rate, as docs/observability.md computes it.
    dup, acc = (
        value(m, f"inbox_{n}_total", **ts_a) for n in ("duplicate_deliveries", "events_accepted")
    )
    assert dup / (acc + dup) == pytest.approx(4 / 7)

    lat = "inbox_event_processing_seconds"
    done, dead = {**ts_a, "state": "completed"}, {**ts_a, "state": "quarantined"}
    assert value(m, f"{lat}_count", **done) == 2
    assert value(m, f"{lat}_sum", **done) == pytest.approx(0.035)
    assert value(m, f"{lat}_bucket", **done, le="0.01") == 0
    assert value(m, f"{lat}_bucket", **done, le="0.025") == 2
    assert value(m, f"{lat}_count", **dead) == 1
    assert value(m, f"{lat}_bucket", **dead, le="300.0") == 0
    assert value(m, f"{lat}_bucket", **dead, le="+Inf") == 1
    assert value(m, "inbox_dead_lettered_total", **ts_a) == 1
    assert value(m, "inbox_event_retries_total", **ts_a) == 1

    def attempts(outcome: str) -> float | None:
        return value(m, "inbox_delivery_attempts_total", tenant=ta, outcome=outcome)

    assert [attempts(o) for o in ("delivered", "retried", "failed", "blocked", "other")] == [
        2,
        1,
        1,
        1,
        1,
    ]
    assert value(m, "inbox_reconcile_mismatches_total", **ts_a, kind="missing") == 3
    assert value(m, "inbox_reconcile_mismatches_total", **ts_a, kind="extra") == 1
    assert value(m, "inbox_reconcile_last_run_timestamp_seconds", **ts_a) > 1.7e9


def _age(engine: Engine, seconds: int, where: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(f"UPDATE events SET received_at = now() - make_interval(secs => :s) {where}"),
            {"s": seconds},
        )


def test_depth_oldest_age_and_dead_letters_come_from_the_database(mclient, make_source, engine):
    busy, idle = make_source(), make_source()
    for i in range(4):
        assert post(mclient, busy, {"n": i}, f"k{i}") == 202
    with engine.begin() as conn:
        ids = conn.execute(text("SELECT id FROM events ORDER BY id")).scalars().all()
        conn.execute(
            text(
                "UPDATE events SET state = 'processing', lease_expires_at = now() + interval '1m'"
                " WHERE id = :id"
            ),
            {"id": ids[0]},
        )
        conn.execute(
            text("UPDATE events SET state = 'quarantined', finished_at = now() WHERE id = :id"),
            {"id": ids[1]},
        )
    _age(engine, 3600, f"WHERE id = {ids[1]}")  # a dead letter is not pending: no effect
    _age(engine, 600, f"WHERE id = {ids[2]}")  # the oldest pending one

    ep = None
    with engine.begin() as conn:
        ep = estore.create_endpoint(conn, busy.tenant, "https://example.com/cb", "whsec_dGVzdA==")
        for i, state in enumerate(("pending", "pending", "sending", "failed")):
            conn.execute(
                text(
                    "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_type, body,"
                    " state, created_at) VALUES (:p, :t, :e, 'x', '\\x7b7d', :s,"
                    " now() - make_interval(secs => :age))"
                ),
                {"p": f"msg_{i}", "t": busy.tenant_id, "e": ep.id, "s": state, "age": 100 * i},
            )

    m = scrape(mclient)
    b, i = (
        {"tenant": busy.tenant, "source": busy.name},
        {"tenant": idle.tenant, "source": idle.name},
    )
    assert value(m, "inbox_depth", **b, state="received") == 2
    assert value(m, "inbox_depth", **b, state="processing") == 1
    assert value(m, "inbox_dead_letters", **b) == 1
    assert 600 <= value(m, "inbox_oldest_pending_age_seconds", **b) < 660
    # A source with nothing waiting has its series, at zero.
    assert value(m, "inbox_depth", **i, state="received") == 0
    assert value(m, "inbox_oldest_pending_age_seconds", **i) == 0
    assert value(m, "inbox_dead_letters", **i) == 0
    bt = {"tenant": busy.tenant}
    assert value(m, "inbox_delivery_backlog", **bt, state="pending") == 2
    assert value(m, "inbox_delivery_backlog", **bt, state="sending") == 1
    assert value(m, "inbox_delivery_backlog", **bt, state="failed") == 1
    assert 100 <= value(m, "inbox_oldest_pending_delivery_age_seconds", **bt) < 160
    assert value(m, "inbox_delivery_backlog", tenant=idle.tenant, state="pending") is None
    assert value(m, "inbox_stats_up") == 1

    # Completing the oldest pending event moves the age to the next oldest.
    with engine.begin() as conn:
        for state in ("processing", "completed"):
            conn.execute(
                text("UPDATE events SET state = :s WHERE id = :id"), {"s": state, "id": ids[2]}
            )
    m = scrape(mclient)
    assert value(m, "inbox_depth", **b, state="received") == 1
    assert value(m, "inbox_oldest_pending_age_seconds", **b) < 60


@pytest.fixture
def dead_engine(settings: Settings) -> Iterator[Engine]:
    eng = make_engine(
        replace(settings, database_url="postgresql://postgres@127.0.0.1:1/none", db_timeout_ms=1000)
    )
    yield eng
    eng.dispose()


def test_a_scrape_answers_when_the_database_is_down(settings, dead_engine):
    app = with_metrics(create_app(settings, engine=dead_engine, doorbell=lambda: None))
    metrics.record_ingest("down-tenant", "down-source", "accepted")
    m = scrape(app.test_client())
    assert value(m, "inbox_stats_up") == 0
    assert value(m, "inbox_events_accepted_total", tenant="down-tenant", source="down-source") >= 1
    assert not any(name == "inbox_depth" for name, _ in m)


def test_record_functions_never_raise():
    metrics.record_ingest(None, object(), "accepted")  # type: ignore[arg-type]
    metrics.record_completed("t", "s", "not a number", "completed")  # type: ignore[arg-type]
    metrics.record_reconcile("t", "s", "x", None)  # type: ignore[arg-type]
    metrics.record_delivery_attempt("t", None)  # type: ignore[arg-type]
    metrics.record_dead_lettered("t", "s", -1)
    metrics.record_sweep(1, 0)


# --- multiprocess mode ------------------------------------------------------------------

WRITER = """
import sys
from inbox.infra import metrics
for _ in range(int(sys.argv[1])):
    metrics.record_ingest("mp-tenant", "mp-source", "accepted")
metrics.record_completed("mp-tenant", "mp-source", float(sys.argv[2]), "completed")
metrics.record_sweep(int(sys.argv[1]), 0)
"""

READER = """
import os
from inbox.infra.config import Settings
from web import create_app
from web.metrics import metrics_bp
app = create_app(Settings(database_url=os.environ["DATABASE_URL"]), doorbell=lambda: None)
if "metrics" not in app.blueprints:
    app.register_blueprint(metrics_bp)
print(app.test_client().get("/metrics").get_data(as_text=True))
app.extensions["inbox"].engine.dispose()
"""


def _run(code: str, *args: str, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def mp_env(tmp_path: Path, database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    # Set in the environment, so it is there before prometheus_client is imported.
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "prom")
    env["DATABASE_URL"] = database_url
    return env


def test_multiprocess_mode_adds_up_every_process(mp_env, engine):
    _run(WRITER, "2", "0.02", env=mp_env)
    _run(WRITER, "3", "200", env=mp_env)
    files = sorted(p.name for p in Path(mp_env["PROMETHEUS_MULTIPROC_DIR"]).iterdir())
    assert len([f for f in files if f.startswith("counter_")]) == 2  # one file per process

    m = parse(_run(READER, env=mp_env))
    ts = {"tenant": "mp-tenant", "source": "mp-source"}
    assert value(m, "inbox_events_accepted_total", **ts) == 5
    lat = {**ts, "state": "completed"}
    assert value(m, "inbox_event_processing_seconds_count", **lat) == 2
    assert value(m, "inbox_event_processing_seconds_bucket", **lat, le="0.025") == 1
    assert value(m, "inbox_sweep_requeued_total") == 5
    assert value(m, "inbox_sweep_last_run_timestamp_seconds") > 1.7e9  # max, not a sum
    assert value(m, "inbox_sweep_last_run_timestamp_seconds") < 2 * 1.7e9
    assert value(m, "inbox_stats_up") == 1  # the depth collector runs in this mode too


def test_the_web_server_prunes_files_of_dead_processes_only(tmp_path):
    prom = tmp_path / "prom"
    prom.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    (prom / f"counter_{dead_pid}.db").write_bytes(b"")
    (prom / f"counter_{os.getpid()}.db").write_bytes(b"")  # a live process (this one)
    # a directory it did not create: not its own
    assert serve.metrics_dir(Settings(metrics_dir=str(prom))) is None
    assert sorted(p.name for p in prom.iterdir()) == [f"counter_{os.getpid()}.db"]


def test_the_web_server_makes_its_own_directory_when_none_is_set(tmp_path, monkeypatch):
    monkeypatch.setattr(serve.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")  # unset, put back after
    owned = serve.metrics_dir(Settings())
    assert owned is not None and config.settings().metrics_dir == owned  # exported
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == owned
    assert Path(owned).parent == tmp_path and Path(owned).is_dir()


def test_the_web_server_sizes_workers_by_cores():
    s = serve.server_settings(Settings())
    assert (s.workers, s.threads, s.port) == (os.cpu_count(), 24, 8000)
    told = serve.server_settings(Settings(web_concurrency=3, web_threads=5, port=9))
    assert (told.workers, told.threads, told.port) == (3, 5, 9)
    target, flags = serve.parse_args(["--workers", "2", "--app", "x:y"], Settings(web_threads=4))
    assert (target, flags.workers, flags.threads) == ("x:y", 2, 4)


# --- readiness --------------------------------------------------------------------------


def ready(settings: Settings, engine: Engine) -> tuple[int, dict]:
    app = create_app(settings, engine=engine, doorbell=lambda: None)
    resp = app.test_client().get("/readyz")
    return resp.status_code, resp.json


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_readyz_pings_the_redis_broker(settings, engine, redis_url):
    status, body = ready(replace(settings, redis_url=redis_url, broker_url=redis_url), engine)
    assert status == 200 and body["checks"] == {
        "database": "ok",
        "schema": "ok",
        "secrets": "ok",
        "playbooks": "ok",
        "keystore": "ok",
        "broker": "ok",
    }
    down = f"redis://127.0.0.1:{closed_port()}/0"
    status, body = ready(replace(settings, redis_url=down, broker_url=down), engine)
    assert status == 503 and body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok" and body["checks"]["broker"] == "ConnectionError"


def test_readyz_connects_to_an_amqp_broker(settings, engine):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        url = f"amqp://guest:guest@127.0.0.1:{port}//"
        status, body = ready(replace(settings, broker_url=url), engine)
        assert status == 200 and body["checks"]["broker"] == "ok"
    url = f"amqp://guest:guest@127.0.0.1:{closed_port()}//"
    status, body = ready(replace(settings, broker_url=url), engine)
    assert status == 503 and body["checks"]["broker"] == "ConnectionRefusedError"


def test_readyz_without_a_broker_checks_the_database_only(settings, engine, dead_engine):
    assert settings.broker_url == settings.redis_url == ""
    status, body = ready(settings, engine)
    assert status == 200 and body["checks"] == {
        "database": "ok",
        "schema": "ok",
        "secrets": "ok",
        "playbooks": "ok",
        "keystore": "ok",
        "broker": "not configured",
    }
    status, body = ready(settings, dead_engine)
    assert status == 503 and body["checks"]["database"] != "ok"


def test_the_web_servers_log_lines_are_json_without_the_thread_count_notice(capsys):
    from granian.log import LogLevels, configure_logging

    configure_logging(LogLevels.info, serve.log_config())
    try:
        granian_log = logging.getLogger("_granian")
        granian_log.warning("Configuration allows spawning up to 24 Python threads, ...")
        granian_log.info("Listening at: http://127.0.0.1:8000")
        lines = capsys.readouterr().err.strip().splitlines()
        assert [json.loads(line)["message"] for line in lines] == [
            "Listening at: http://127.0.0.1:8000"
        ]
    finally:  # leave the root logger and granian's loggers as the other tests expect
        for name in ("_granian", "granian.access"):
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).propagate = True
