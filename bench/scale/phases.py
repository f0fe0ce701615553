"""The scale benchmark's measurements, each run the same way against either database.

- **ingest**: the receiver (``python -m web`` with the web server's defaults, no broker:
  the doorbell is a no-op, as in ``bench/ingest.py``) driven by ``bench/common/load.py``'s wrk
  script, 32 senders, unique keys, signed 1 KiB events; 2xx/s, p50/p99, CPU ms per
  accepted event;
- **reads**: on the same server, the API's and the console's event list and one event
  (``bench/scale/reads.py``);
- **drain**: ``bench/drain.py``'s approach and playbook: N pending events of the no-op
  playbook (``INBOX_PLAYBOOKS=bench.drain``), one
  ``celery -A workers.app worker -Q inbox --concurrency 2``, one doorbell, timed from it
  to the last ``finished_at``; rung again (as beat's sweep would) if progress stalls.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg
from celery import Celery

from bench.common import cpu, load, procs
from bench.scale import ledger, reads
from web.keepalive import keepalive_requests

HOST = "127.0.0.1"


def token(db_url: str) -> str:
    """A viewer token for every tenant, made with the operator's CLI."""
    done = subprocess.run(
        [sys.executable, "-m", "inbox.cli", "tokens", "create", "--name",
         f"bench-scale-{uuid.uuid4().hex[:8]}",
         "--role", "viewer"],
        env={**os.environ, "DATABASE_URL": db_url}, cwd=procs.ROOT, check=True,
        capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def checkpoint(db_url: str) -> None:
    """No measurement pays for the last one's dirty pages."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def _receiver(args: argparse.Namespace, db_url: str) -> tuple[procs.Proc, int]:
    """The receiver as ``bench/ingest.py`` runs it: the project's web server, its pool
    size, no broker (the doorbell is a no-op: ingest alone is measured)."""
    env = {
        "DATABASE_URL": db_url,
        "REDIS_URL": None,
        "BROKER_URL": None,
        "PROMETHEUS_MULTIPROC_DIR": None,
        "INBOX_DB_POOL_SIZE": str(args.pool_size),
        "PYTHONUNBUFFERED": "1",
        "WEB_KEEPALIVE_REQUESTS": str(keepalive_requests()),
    }
    proc, port = procs.web("web.wsgi:app", env, args.workers, args.threads)
    procs.wait_http(proc, port)
    return proc, port


def ingest_and_reads(
    args: argparse.Namespace, db_url: str, dbname: str, tag: str, bearer: str, source_id: int
) -> dict[str, Any]:
    """Ingest under wrk, then the operator's reads, against one receiver."""
    receiver, port = _receiver(args, db_url)
    try:
        sampler = cpu.Sampler(
            {"receiver": receiver.pid, "load": os.getpid()}, cpu.postmaster_of(db_url), dbname
        )
        url = f"http://{HOST}:{port}/"
        script = procs.RESULTS / f"wrk-scale-{tag}.lua"
        path = f"/hooks/{ledger.TENANT}/{ledger.SOURCE}"
        script.write_text(load.wrk_script(path, ledger.SECRET.encode(), False))
        checkpoint(db_url)
        try:
            load.run_wrk(url, script, args.senders, args.warmup, f"{tag}-w")
            before = sampler.sample()
            run = load.run_wrk(url, script, args.senders, args.seconds, f"{tag}-m")
            after = sampler.sample()
        finally:
            script.unlink()
        seconds = run["duration_us"] / 1e6
        ok = sum(n for s, n in run["statuses"].items() if 200 <= int(s) < 300)
        cores = cpu.window(before, after, seconds)
        result: dict[str, Any] = {
            "ingest": {
                "senders": args.senders,
                "seconds": seconds,
                "ok_per_s": ok / seconds,
                "p50_ms": run["p50_ms"],
                "p99_ms": run["p99_ms"],
                "statuses": run["statuses"],
                "cpu_ms_per_2xx": {k: v * seconds * 1000 / ok for k, v in cores.items() if ok},
            }
        }
        result["ingest"]["settled"] = ledger.settle(db_url, source_id)
        with psycopg.connect(db_url) as conn:
            ids = ledger.sample_public_ids(conn, args.reads + args.read_warmup)
        result["reads"] = reads.measure(
            port, bearer, ids, ledger.DEAD_LETTER_TENANT, args.reads, args.read_warmup
        )
        return result
    finally:
        receiver.stop()


class Broker:
    """A redis-server of the run's own on a free port: nothing shared is flushed."""

    def __init__(self) -> None:
        self.port = procs.free_port()
        self.url = f"redis://{HOST}:{self.port}/0"
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", HOST, "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        import redis

        deadline = time.monotonic() + 20
        while True:
            try:
                if redis.Redis.from_url(self.url, socket_timeout=1).ping():
                    break
            except redis.RedisError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the run's redis-server did not start") from None
                time.sleep(0.05)
        self.ctl = Celery("bench_scale_ctl", broker=self.url)
        self.ctl.conf.broker_connection_retry_on_startup = True

    def stop(self) -> None:
        self.ctl.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def drain(
    args: argparse.Namespace, broker: Broker, db_url: str, source_id: int, tag: str
) -> dict[str, Any]:
    n = args.drain_events
    since = ledger.insert_pending(db_url, source_id, n)
    checkpoint(db_url)
    env = {
        "DATABASE_URL": db_url,
        "REDIS_URL": broker.url,
        "BROKER_URL": "",
        "INBOX_PLAYBOOKS": "bench.drain",  # its no-op playbook (bench/drain.py)
        "PYTHONPATH": str(procs.ROOT),  # where bench.drain, which holds the playbook, is found
        "BENCH_BROKER_URL": broker.url,
    }
    worker = procs.celery_worker("workers.app", "inbox", 2, env, f"scale-{tag}")
    rerings = 0
    try:
        procs.wait_celery(broker.ctl, worker)
        t0 = time.time()
        broker.ctl.send_task("inbox.drain", queue="inbox")
        last, last_change = -1, time.monotonic()
        with psycopg.connect(db_url, autocommit=True) as conn:
            while True:
                done, latest = ledger.drain_progress(conn, source_id, since)
                if done >= n:
                    break
                if done != last:
                    last, last_change = done, time.monotonic()
                elif time.monotonic() - last_change > 20:
                    if rerings >= 3:
                        raise RuntimeError(f"drain stalled at {done}/{n}; see {worker.log_path}")
                    rerings += 1  # the chain of drain tasks ended early: ring as beat would
                    broker.ctl.send_task("inbox.drain", queue="inbox")
                    last_change = time.monotonic()
                time.sleep(0.2)
    finally:
        worker.stop()
    seconds = latest - t0
    return {"events": n, "seconds": seconds, "per_s": n / seconds, "rerings": rerings}
