"""The run's stack: a private cluster and Redis, the database, the sink and the Procfile's
processes; CPU and memory by process kind."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from celery import Celery

from bench.common import cpu, procs
from bench.pipeline.playbook import SECRET, SOURCE, TENANT

KINDS = ("web", "worker", "courier", "beat")


@dataclass
class Stack:
    """The run's cluster, Redis, database, sink and the Procfile's processes."""

    webs: int
    # The Procfile's worker line runs ``--concurrency`` processes (WORKER_CONCURRENCY, 2 by
    # default); the courier is scaled as a user scales a Procfile line: more courier
    # processes, each with the line's 16 threads (COURIER_THREADS).
    worker_procs: int = 2
    courier_procs: int = 1
    # INBOX_MAX_BACKLOG for the web processes (0: off, the setting's default).
    max_backlog: int = 0
    # Each process kind connects as a role of its own (``bench_web``, ``bench_worker``, …),
    # so that ``pg_stat_statements`` counts its statements apart (bench.pipeline.profile).
    roles: bool = False
    cluster_settings: dict[str, str] | None = None
    cluster: Any = None
    redis: procs.PrivateRedis | None = None
    db_name: str = ""
    url: str = ""
    sink: subprocess.Popen[bytes] | None = None
    sink_port: int = 0
    web_procs: list[tuple[procs.Proc, int]] = field(default_factory=list)
    worker: procs.Proc | None = None
    couriers: list[procs.Proc] = field(default_factory=list)
    beat: procs.Proc | None = None
    ctl: Celery | None = None
    keys_url: str = ""  # the key store's database (INBOX_KEYSTORE_URL)

    def env(self, kind: str = "") -> dict[str, str]:
        """The Procfile's environment; ``kind`` (with ``roles``): its own database role."""
        assert self.redis is not None
        env = {
            "DATABASE_URL": self.role_url(kind) if self.roles and kind else self.url,
            "REDIS_URL": self.redis.url,
            "BENCH_EFFECTS_URL": self.role_url("playbook") if self.roles else self.url,
            "INBOX_PLAYBOOKS": "bench.pipeline.playbook",
            "INBOX_ALLOW_PRIVATE_TARGETS": "1",
            # Payloads sealed at rest, as docs/how-to/deploy.md has every deployment do.
            "INBOX_KEYSTORE_URL": self.keys_url,
            "PYTHONPATH": str(procs.ROOT),
        }
        if self.max_backlog:
            env["INBOX_MAX_BACKLOG"] = str(self.max_backlog)
        return env

    def start(self) -> None:
        from dev.embedded import PrivatePostgres

        procs.use_own_kek()
        # 400 connections, as bench.drain_peers: 4 worker and 4 courier processes (16
        # threads each) pass PostgreSQL's default 100, as they would in a deployment.
        settings = {"max_connections": "400", **(self.cluster_settings or {})}
        self.cluster = PrivatePostgres(settings=settings)
        self.redis = procs.PrivateRedis("pipeline-redis")
        self.db_name, self.url = procs.create_database(self.cluster.url, "inbox_pipeline")
        _, self.keys_url = procs.empty_database(self.cluster.url, "inbox_pipeline_keys")
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE pipeline_effects (step_key text PRIMARY KEY)")
            for kind in (*KINDS, "playbook") if self.roles else ():
                conn.execute(f"CREATE ROLE bench_{kind} LOGIN SUPERUSER")
        self.sink = subprocess.Popen(
            [sys.executable, "-m", "bench.deliver", "sink"], cwd=procs.ROOT, stdout=subprocess.PIPE
        )
        assert self.sink.stdout is not None
        self.sink_port = int(self.sink.stdout.readline())
        self.cli("tenants", "create", TENANT)
        self.cli(
            *("sources", "create", "--tenant", TENANT, "--name", SOURCE, "--scheme", "hmac"),
            *("--secret", SECRET, "--option", f"playbook={json.dumps('pipeline')}"),
            *("--option", "max_attempts=50"),
        )
        self.cli(
            *("endpoints", "create", "--tenant", TENANT),
            *("--url", f"http://127.0.0.1:{self.sink_port}/pipeline/"),
            *("--retry-schedule", "1", "--max-attempts", "50", "--max-in-flight", "16"),
        )
        self.ctl = Celery("bench_pipeline", broker=self.redis.url)
        for i in range(self.webs):
            env = self.env("web")
            proc, port = procs.web("web.wsgi:app", env, 2, 24, tag=f"pipeline-web{i}")
            self.web_procs.append((proc, port))
        self.start_worker()
        self.start_courier()
        self.beat = procs.celery_beat("workers.app", self.env("beat"), "pipeline-beat")
        for proc, port in self.web_procs:
            procs.wait_http(proc, port, timeout=60)
        assert self.worker is not None
        for p in (self.worker, *self.couriers):
            procs.wait_celery(self.ctl, p)

    def _celery(self, queue: str, concurrency: int, tag: str, *extra: str) -> procs.Proc:
        kind = "worker" if queue == "inbox" else "courier"
        env = self.env(kind)
        return procs.celery_worker("workers.app", queue, concurrency, env, tag, *extra)

    def analyze(self) -> None:
        """Statistics for every table, as a running system's autovacuum keeps them. A fresh
        database has none until autovacuum's first pass (a minute or more), and the
        planner's guesses meanwhile cost some statements ten times their planned cost
        (bench/README.md): measured levels start after the warm-up and this."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("ANALYZE")

    def role_url(self, kind: str) -> str:
        """The run's database as ``bench_<kind>`` (a role made with ``roles``)."""
        scheme, _, rest = self.url.partition("://")
        return f"{scheme}://bench_{kind}@{rest.partition('@')[2]}"

    def start_worker(self) -> None:
        self.worker = self._celery(
            "inbox", self.worker_procs, "pipeline-worker", "--loglevel", "INFO"
        )

    def start_courier(self) -> None:
        """Every courier process (``courier_procs``), each a node of its own."""
        self.couriers = [
            self._celery(
                "deliveries", 16, f"pipeline-courier{i}", "--pool", "threads", "--loglevel", "INFO"
            )
            for i in range(self.courier_procs)
        ]

    def cli(self, *args: str) -> str:
        env = {**os.environ, **self.env()}
        done = subprocess.run(
            [sys.executable, "-m", "inbox.cli", *args],
            env=env,
            cwd=procs.ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"inbox {' '.join(args[:2])}: {done.stderr.strip()}")
        return done.stdout

    def trees(self) -> dict[str, list[int]]:
        """Process kind -> root pids."""
        assert self.redis is not None and self.sink is not None
        out = {"web": [p.pid for p, _ in self.web_procs]}
        for kind, p in (("worker", self.worker), ("beat", self.beat)):
            out[kind] = [p.pid] if p is not None else []
        out["courier"] = [p.pid for p in self.couriers]
        out["redis"] = [self.redis.proc.pid]
        out["sink"] = [self.sink.pid]
        return out

    def stop(self) -> None:
        for p in [self.beat, *self.couriers, self.worker, *(p for p, _ in self.web_procs)]:
            if p is not None:
                p.stop()
        if self.sink is not None:
            self.sink.terminate()
            self.sink.wait(5)
            if self.sink.stdout is not None:
                self.sink.stdout.close()
        if self.redis is not None:
            self.redis.stop()
        if self.cluster is not None:
            self.cluster.stop()


def run_on(stack: Stack, measure: Callable[[], None]) -> int:
    """A tool's run: start ``stack``, ``measure`` on it, stop it whatever happens; the exit
    code, 1 (the traceback printed) if anything failed."""
    try:
        stack.start()
        measure()
        return 0
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        stack.stop()


# -- CPU and memory by process kind --------------------------------------------------------


def _kinds(stack: Stack) -> dict[str, list[int]]:
    return {**stack.trees(), "postgres": [stack.cluster.pid]}


def cpu_seconds(stack: Stack) -> dict[str, float]:
    """Cumulative CPU seconds by process kind (each root's live tree and the children it
    reaped), PostgreSQL's whole cluster, this process (the sender) and the machine's."""
    table = cpu._table()
    out = {}
    for kind, roots in _kinds(stack).items():
        pids: set[int] = set()
        for root in roots:
            pids |= cpu._descendants(table, root)
        own = sum(table[p][1] for p in pids if p in table)
        out[kind] = own + sum(table[r][2] for r in roots if r in table)
    out["sender"] = cpu.process_seconds(os.getpid())
    out["machine"] = cpu.machine_cpu()[0]
    return out


def pss_mb(stack: Stack) -> dict[str, float]:
    """Memory (MiB) by process kind: the proportional set size summed over each tree, so
    that pages shared by several processes (PostgreSQL's shared buffers, a forked
    worker's) are counted once in all, not once per process."""
    table = cpu._table()
    out = {}
    for kind, roots in _kinds(stack).items():
        kb = 0
        pids: set[int] = set()
        for root in roots:
            pids |= cpu._descendants(table, root)
        for pid in pids:
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        kb += int(line.split()[1])
        out[kind] = round(kb / 1024, 1)
    return out
