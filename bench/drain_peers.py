"""The drain beside the PostgreSQL queues a team would pick instead, in one run.

On a private PostgreSQL cluster (initdb/pg_ctl, PostgreSQL's defaults but
max_connections) and a private redis-server (our broker), each system drains --events
stored jobs with 2 worker processes, rounds alternating (ours, pgqueuer-asyncpg,
pgqueuer-psycopg, procrastinate, DBOS, then again), for two workloads:

- ``noop``: one effect-free step per event;
- ``2step``: an effect-free step, then an effect row keyed by the step key (INSERT … ON
  CONFLICT DO NOTHING into ``bench_effects`` in the same database).

Ours: the Procfile's worker (``celery -A workers.app worker -Q inbox --concurrency 2``) on
pending events stored as the receiver stores them, rung once (``inbox.drain``), the
playbooks in ``bench/drain_playbooks.py``. Peers: ``bench/peers/<peer>.py`` run by
``.venv-peers`` (created from ``bench/peers/requirements.txt`` on first use; never the
project's venv), 2 processes each, configured as their docs recommend (see each module).
Each run gets a fresh database; workers start and set up before the clock (a ready file,
a go file); the rate is events over the go → the last completion's database timestamp.
CPU from /proc: the worker processes' trees, the cluster (all but other databases'
backends) and, for ours, redis-server. A run counts only if every event completed (and,
for 2step, effect rows == events).

    .venv/bin/python -m bench.drain_peers [--events 5000] [--rounds 3]
        [--systems ours,pgqueuer-asyncpg,...] [--workloads noop,2step] [--checkout PATH]

``--checkout PATH`` (repeatable) adds ours as built in another git checkout (its own
``.venv``, migrations and worker), right after ours in each round. Prints a table
(median and min-max of the rounds), writes bench/results/drain_peers.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import redis
from celery import Celery

from bench.common import cpu, procs

PEERS_VENV = procs.ROOT / ".venv-peers"
REQUIREMENTS = procs.BENCH / "peers" / "requirements.txt"
WORKLOADS = ("noop", "2step")
PROCESSES = 2
PLAYBOOKS = procs.BENCH / "drain_playbooks.py"


@dataclass(frozen=True)
class Peer:
    """A peer: its module in bench/peers/, the flags its docs lead to, and how the run's
    database says how many jobs completed and when the last one did."""

    label: str
    module: str
    flags: tuple[str, ...]
    done_sql: str
    last_sql: str
    config: str
    # Flags of ``prepare`` alone: ``--enqueue-each 32`` enqueues a job per transaction from
    # 32 connections, as a web handler enqueues one per request (ours-web's 32 senders), so
    # the rows drained were committed one by one, as ours-web's and ours-deployed's are.
    prepare_flags: tuple[str, ...] = ()


PGQ_DONE = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
PGQ_LAST = "SELECT extract(epoch FROM max(created)) FROM pgqueuer_log WHERE status = 'successful'"
PEERS = {
    p.label: p
    for p in (
        Peer(
            "pgqueuer-asyncpg",
            "bench.peers.pgq",
            ("--driver", "asyncpg", "--batch-size", "100", "--concurrency", "10"),
            PGQ_DONE,
            PGQ_LAST,
            "pgqueuer 1.6, asyncpg, batch 100",
        ),
        Peer(
            "pgqueuer-asyncpg-each",
            "bench.peers.pgq",
            ("--driver", "asyncpg", "--batch-size", "100", "--concurrency", "10"),
            PGQ_DONE,
            PGQ_LAST,
            "pgqueuer 1.6, asyncpg, batch 100; jobs enqueued one per transaction",
            ("--enqueue-each", "32"),
        ),
        Peer(
            "pgqueuer-psycopg",
            "bench.peers.pgq",
            ("--driver", "psycopg", "--batch-size", "100", "--concurrency", "10"),
            PGQ_DONE,
            PGQ_LAST,
            "pgqueuer 1.6, psycopg, batch 100",
        ),
        Peer(
            "procrastinate",
            "bench.peers.procrastinate_peer",
            (
                "--concurrency",
                "10",
            ),
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
            "SELECT extract(epoch FROM max(at)) FROM procrastinate_events WHERE type = 'succeeded'",
            "procrastinate 3.10, concurrency 10",
        ),
        Peer(
            "dbos",
            "bench.peers.dbos_peer",
            ("--concurrency", "32", "--polling", "0.1"),
            "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'",
            "SELECT max(updated_at) / 1000.0 FROM dbos.workflow_status WHERE status = 'SUCCESS'",
            "DBOS 3.4, queue, 32 per process, polling 0.1 s",
        ),
    )
}
OURS_DONE = "SELECT count(*) FROM events WHERE state IN ('completed', 'quarantined')"
OURS_LAST = "SELECT extract(epoch FROM max(finished_at)) FROM events"
SYSTEMS = ("ours", "ours-web", "ours-deployed", *PEERS)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.drain_peers", description=__doc__)
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--events", type=int, default=5_000, help="stored jobs per run")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each runs every system")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, in order")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="noop, 2step")
    checkout = "also ours from this git checkout (its .venv; repeat for more)"
    p.add_argument("--checkout", type=Path, action="append", default=[], help=checkout)
    quiet = "before each run, wait up to this long for the machine to be < 25%% busy"
    p.add_argument("--quiet-wait", type=float, default=0.0, help=quiet)
    p.add_argument("--timeout", type=float, default=600.0, help="a run stalled this long fails")
    p.add_argument("--out", type=Path, default=procs.RESULTS / "drain_peers.json")
    return p.parse_args(argv)


# -- the run's servers and venv ----------------------------------------------------------


def peers_python() -> Path:
    """.venv-peers/bin/python, created from bench/peers/requirements.txt when missing."""
    python = PEERS_VENV / "bin" / "python"
    stamp = PEERS_VENV / ".installed"
    if not stamp.exists() or stamp.read_text() != REQUIREMENTS.read_text():
        print(f"installing the peers into {PEERS_VENV} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)]
        subprocess.run(pip, check=True)
        stamp.write_text(REQUIREMENTS.read_text())
    return python


@contextmanager
def private_redis() -> Iterator[tuple[str, int]]:
    """A redis-server of the run's own (our broker): (url, pid)."""
    port = procs.free_port()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    proc = procs.Proc([*args, "--appendonly", "no"], {}, "peers-redis")
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or not proc.alive():
                    raise RuntimeError(f"redis-server did not start:\n{proc.tail()}") from None
                time.sleep(0.05)
        client.close()
        yield url, proc.pid
    finally:
        proc.stop()


@dataclass
class Run:
    """What one system's run needs: the servers, its database, its processes."""

    args: argparse.Namespace
    pg_url: str
    postmaster: int
    redis_url: str
    redis_pid: int
    peers_python: Path
    playbooks_dir: Path
    started: list[procs.Proc] = field(default_factory=list)

    def database(self, name: str) -> str:
        with psycopg.connect(self.pg_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.pg_url.rsplit("/", 1)[0] + "/" + name

    def drop(self, name: str) -> None:
        procs.drop_database(self.pg_url, name)

    def stop_all(self) -> None:
        while self.started:
            self.started.pop().stop()


# -- one system, one workload ------------------------------------------------------------


def _scalar(conn: psycopg.Connection[Any], sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    return row[0] if row else None


def _ready(files: list[Path], procs_: list[procs.Proc], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not all(f.exists() for f in files):
        for p in procs_:
            if not p.alive():
                raise RuntimeError(f"{p.tag} exited:\n{p.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers not ready in {timeout:.0f} s")
        time.sleep(0.05)


def _measure(
    run: Run,
    dbname: str,
    url: str,
    trees: dict[str, int],
    go: Callable[[], None],
    done_sql: str,
    last_sql: str,
    stalled: Callable[[int], None] | None,
) -> dict[str, Any]:
    """``go``, wait until ``done_sql`` counts every event; rate and CPU per event."""
    n = run.args.events
    quiet = cpu.wait_quiet(run.args.quiet_wait)
    sampler = cpu.Sampler(trees | {"bench": os.getpid()}, run.postmaster, dbname, private=True)
    load_before = os.getloadavg()[0]
    with psycopg.connect(url, autocommit=True) as conn:
        before, t0 = sampler.sample(), time.time()
        go()
        procs.wait_progress(lambda: int(_scalar(conn, done_sql) or 0), n, dbname, stalled)
        after = sampler.sample()
        last = float(_scalar(conn, last_sql) or time.time())
    used = cpu.window(before, after, 1.0)
    seconds = max(last - t0, 1e-6)
    workers = sum(v for k, v in used.items() if k.startswith("worker"))
    out = {"seconds": round(seconds, 3), "per_s": round(n / seconds, 1)}
    out |= {"worker_cpu_ms_per_event": round(workers / n * 1000, 3)}
    out |= {"postgres_cpu_ms_per_event": round(used.get("postgres", 0) / n * 1000, 3)}
    if "redis" in used:
        out["redis_cpu_ms_per_event"] = round(used["redis"] / n * 1000, 3)
    out |= {"machine_busy_s": round(used["machine"], 2), "other_cpu_s": round(used["other"], 2)}
    return out | quiet | {"loadavg_before": round(load_before, 2)}


def _check(url: str, workload: str, done_sql: str, n: int) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        done = int(_scalar(conn, done_sql) or 0)
        effects = int(_scalar(conn, "SELECT count(*) FROM bench_effects") or 0)
    want = n if workload == "2step" else 0
    return {"completed": done, "effects": effects, "ok": done == n and effects == want}


@dataclass(frozen=True)
class Ours:
    """How ours is run: ``fill`` ``sql`` (``drain_playbooks.fill_pending``, the rows the
    receiver would store) or ``web`` (every event a signed POST through ``python -m web``,
    which stays up beside the worker while it drains); ``worker`` ``bench`` (log level
    WARNING, without gossip and mingle) or ``procfile`` (the Procfile's worker line as it
    is: log level INFO, gossip and mingle on)."""

    fill: str
    worker: str


OURS = {
    "ours": Ours("sql", "bench"),
    "ours-web": Ours("web", "bench"),
    "ours-deployed": Ours("web", "procfile"),
}
OURS_CONFIG = {
    "ours": "worker 2 processes (WARNING, no gossip/mingle), events stored by SQL",
    "ours-web": "worker 2 processes (WARNING, no gossip/mingle), events through the receiver",
    "ours-deployed": "the Procfile's worker line as is, events through the receiver",
}
SECRET = "drain-peers-secret"


def procfile_worker(venv: Path, root: Path, node: str) -> list[str]:
    """The Procfile's ``worker:`` line, its defaults filled in, our node name."""
    line = next(
        x.split(":", 1)[1]
        for x in (root / "Procfile").read_text().splitlines()
        if x.startswith("worker:")
    )
    line = re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: os.environ.get(m[1], m[2]), line)
    args = shlex.split(line)
    if args[0] == "celery":
        args[0] = str(venv / "celery")
    if "-n" in args:
        args[args.index("-n") + 1] = node
    return args


def post_events(port: int, n: int, workload: str, senders: int = 32) -> None:
    """``n`` signed events through the receiver, ``senders`` keep-alive connections."""
    import http.client
    from concurrent.futures import ThreadPoolExecutor

    from bench.common.load import signed

    body = json.dumps({"type": EVENT_TYPES[workload]}, separators=(",", ":")).encode()
    path = f"/hooks/bench/{workload}"

    def send(part: range) -> int:
        """Sends ``part``; a refused event (503 on a loaded machine) is sent again, as a
        provider would, up to 20 times; returns how many were never accepted."""
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        refused = 0
        try:
            for i in part:
                for _ in range(20):
                    conn.request("POST", path, body=body, headers=signed(SECRET, body, f"k{i}"))
                    resp = conn.getresponse()
                    resp.read()
                    if resp.status < 300:
                        break
                    time.sleep(0.2)
                else:
                    refused += 1
        finally:
            conn.close()
        return refused

    with ThreadPoolExecutor(senders) as pool:
        refused = sum(pool.map(send, [range(i, n, senders) for i in range(senders)]))
    if refused:
        raise RuntimeError(f"the receiver refused {refused} of {n} events")


def wait_rung_out(redis_url: str, timeout: float = 30) -> None:
    """Until the worker's ring at start is drained: the doorbell flag cleared (a drain
    began) and no drain message left in the queue."""
    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout
    try:
        while client.exists("inbox:doorbell") or client.llen("inbox"):
            if time.monotonic() > deadline:
                raise RuntimeError("the worker's ring at start was not drained")
            time.sleep(0.05)
    finally:
        client.close()


EVENT_TYPES = {"noop": "peers.noop", "2step": "peers.two-step"}  # drain_playbooks.py's


def run_ours(
    run: Run, workload: str, checkout: Path | None, name: str, how: Ours = OURS["ours"]
) -> dict[str, Any]:
    """The worker is started and its ring at start drained BEFORE the events are stored:
    a worker that starts with events waiting drains them at once, before the clock."""
    root = checkout or procs.ROOT
    venv = root / ".venv" / "bin"
    dbname = f"peers_{name}"
    url = run.database(dbname)
    script = str(run.playbooks_dir / "drain_playbooks.py")
    env = {**os.environ, "PYTHONPATH": str(root), "DATABASE_URL": url}
    try:
        secret = [SECRET] if how.fill == "web" else []
        prepare = [str(venv / "python"), script, "prepare", url, "0", workload, *secret]
        subprocess.run(prepare, check=True, cwd=root, env=env, capture_output=True)
        env_w = {"DATABASE_URL": url, "REDIS_URL": run.redis_url, "BROKER_URL": ""}
        env_w |= {"BENCH_BROKER_URL": run.redis_url, "INBOX_PLAYBOOKS": "drain_playbooks"}
        env_w |= {"BENCH_EFFECTS_URL": url, "PYTHONPATH": f"{root}:{run.playbooks_dir}"}
        if how.fill == "web":
            # No broker for the receiver while it stores the events: its rings would
            # start the drain before the clock. What it stores is the same either way.
            env_web = {**env_w, "REDIS_URL": None, "BROKER_URL": None}
            web, port = procs.web("web.wsgi:app", env_web, 2, 24, tag=f"{name}-web")
            run.started.append(web)
            procs.wait_http(web, port, timeout=60)
        node = f"peers-{name}-{time.monotonic_ns()}@%h"
        if how.worker == "procfile":
            args = procfile_worker(venv, root, node)
        else:
            args = [str(venv / "celery"), "-A", "workers.app", "worker", "-Q", "inbox"]
            args += ["--concurrency", str(PROCESSES), "-n", node, "--loglevel", "WARNING"]
            args += ["--without-gossip", "--without-mingle"]
        worker = procs.Proc(args, env_w, name, root)
        worker.node = node.replace("%h", __import__("socket").gethostname())
        run.started.append(worker)
        ctl = Celery("peers_ctl", broker=run.redis_url)
        ctl.conf.broker_connection_retry_on_startup = True
        try:
            procs.wait_celery(ctl, worker)
            wait_rung_out(run.redis_url)
            if how.fill == "web":
                post_events(port, run.args.events, workload)
            else:
                fill = [str(venv / "python"), script, "fill", url, str(run.args.events), workload]
                subprocess.run(fill, check=True, cwd=root, env=env, capture_output=True)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("ANALYZE events")
                early = int(_scalar(conn, OURS_DONE) or 0)
            if early:
                raise RuntimeError(f"{early} events were drained before the clock")

            def ring() -> None:
                ctl.send_task("inbox.drain", queue="inbox")

            rerings: list[int] = []

            def ring_again(done: int) -> None:
                """The chain of drain tasks ended early: ring again, as beat's sweep would."""
                if len(rerings) >= 3:
                    raise RuntimeError(f"drain stalled at {done}/{run.args.events}")
                rerings.append(done)
                ring()

            trees = {"worker": worker.pid, "redis": run.redis_pid}
            got = _measure(run, dbname, url, trees, ring, OURS_DONE, OURS_LAST, ring_again)
            got["rerings"] = rerings
        finally:
            ctl.close()
        run.stop_all()
        return got | _check(url, workload, OURS_DONE, run.args.events)
    finally:
        run.stop_all()
        run.drop(dbname)


def run_peer(run: Run, peer: Peer, workload: str, name: str) -> dict[str, Any]:
    dbname = f"peers_{name}"
    url = run.database(dbname)
    base = [str(run.peers_python), "-m", peer.module]
    common = ["--url", url, "--workload", workload, *peer.flags]
    env = {"PYTHONPATH": str(procs.ROOT)}
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE bench_effects (step_key text PRIMARY KEY)")
        prepare = [*base, "prepare", *common, *peer.prepare_flags, "--events", str(run.args.events)]
        done = subprocess.run(
            prepare, cwd=procs.ROOT, env={**os.environ, **env}, text=True, capture_output=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"{peer.label} prepare failed:\n{done.stderr[-2000:]}")
        with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
            go, ready = Path(tmp) / "go", [Path(tmp) / f"ready-{i}" for i in range(PROCESSES)]
            for i in range(PROCESSES):
                flags = ["--index", str(i), "--ready", str(ready[i]), "--go", str(go)]
                worker = procs.Proc([*base, "work", *common, *flags], env, f"{name}-{i}")
                run.started.append(worker)
            _ready(ready, run.started)
            trees = {f"worker{i}": p.pid for i, p in enumerate(run.started)}
            got = _measure(run, dbname, url, trees, go.touch, peer.done_sql, peer.last_sql, None)
            run.stop_all()
        return got | _check(url, workload, peer.done_sql, run.args.events)
    finally:
        run.stop_all()
        run.drop(dbname)


# -- the rounds and the report -----------------------------------------------------------


def systems(args: argparse.Namespace) -> list[tuple[str, Path | None]]:
    """(label, checkout) in round order; each --checkout right after ours."""
    out: list[tuple[str, Path | None]] = []
    for label in (s.strip() for s in args.systems.split(",") if s.strip()):
        if label not in SYSTEMS:
            raise SystemExit(f"unknown system {label!r}; known: {', '.join(SYSTEMS)}")
        out.append((label, None))
        if label == "ours":
            out += [(f"ours@{co.resolve().name}", co.resolve()) for co in args.checkout]
    return out


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (workload, system): the median of the rounds and their min and max."""
    out = []
    for key in dict.fromkeys((r["workload"], r["system"]) for r in runs):
        group = [r for r in runs if (r["workload"], r["system"]) == key and "per_s" in r]
        if not group:
            continue
        row: dict[str, Any] = {"workload": key[0], "system": key[1], "rounds": len(group)}
        for k in ("per_s", "worker_cpu_ms_per_event", "postgres_cpu_ms_per_event"):
            values = [r[k] for r in group]
            row[k] = round(statistics.median(values), 3)
            row[f"{k}_min_max"] = [min(values), max(values)]
        if any("redis_cpu_ms_per_event" in r for r in group):
            row["redis_cpu_ms_per_event"] = statistics.median(
                r.get("redis_cpu_ms_per_event", 0.0) for r in group
            )
        row["all_ok"] = all(r["ok"] for r in group)
        row["config"] = group[0]["config"]
        out.append(row)
    return out


HEAD = ("workload", "system", "events/s median", "min-max", "worker ms/ev", "pg ms/ev", "ok")
WIDTHS = (8, 18, 15, 15, 12, 9, 5)


def table(rows: list[dict[str, Any]]) -> str:
    def line(cells: tuple[str, ...]) -> str:
        pairs = zip(cells, WIDTHS, strict=True)
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(pairs))

    lines = [line(HEAD), line(tuple("-" * w for w in WIDTHS))]
    for r in rows:
        lo, hi = r["per_s_min_max"]
        worker = f"{r['worker_cpu_ms_per_event']:.2f}"
        if "redis_cpu_ms_per_event" in r:
            worker += f"+{r['redis_cpu_ms_per_event']:.2f}"
        cells: tuple[str, ...] = (r["workload"], r["system"], f"{r['per_s']:,.0f}")
        cells += (f"{lo:,.0f}-{hi:,.0f}", worker, f"{r['postgres_cpu_ms_per_event']:.2f}")
        cells += ("yes" if r["all_ok"] else "NO",)
        lines.append(line(cells))
    lines.append("worker ms/ev: the 2 worker processes' CPU per event (ours: +redis-server's)")
    return "\n".join(lines)


def rounds(run: Run, results: dict[str, Any]) -> None:
    workloads = [w.strip() for w in run.args.workloads.split(",") if w.strip()]
    order = systems(run.args)
    for r in range(run.args.rounds):
        for workload in workloads:
            for label, checkout in order:
                name = f"{label.replace('@', '_').replace('-', '_')}_{workload}_{r}".lower()
                is_ours = label in OURS or checkout is not None
                config = OURS_CONFIG.get(label, "Procfile worker, 2 processes")
                if not is_ours:
                    config = PEERS[label].config
                head = {"round": r, "workload": workload, "system": label, "config": config}
                try:
                    if is_ours:
                        how = OURS.get(label, OURS["ours"])
                        got = run_ours(run, workload, checkout, name, how)
                    else:
                        got = run_peer(run, PEERS[label], workload, name)
                except Exception:
                    traceback.print_exc()
                    got = {"error": traceback.format_exc()[-3000:], "ok": False}
                results["runs"].append(head | got)
                shown = f"{got['per_s']:,.0f}/s" if "per_s" in got else "FAILED"
                print(f"  round {r} {workload:5} {label:18} {shown} ok={got['ok']}", flush=True)
                results["summary"] = summarize(results["runs"])


def main(argv: list[str] | None = None) -> int:
    from dev.embedded import PrivatePostgres

    args = parse_args(argv)
    procs.RESULTS.mkdir(parents=True, exist_ok=True)
    procs.use_own_kek()
    python = peers_python()
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "config": {k: getattr(args, k) for k in ("events", "rounds", "systems", "workloads")},
        "loadavg_start": list(os.getloadavg()),
        "peers_requirements": REQUIREMENTS.read_text().splitlines(),
        "runs": [],
        "summary": [],
    }
    status = 0
    # DBOS's and procrastinate's pools, at the sizes their docs lead to, need more than
    # PostgreSQL's default 100 connections for 2 processes; nothing else is changed.
    cluster = PrivatePostgres(settings={"max_connections": "400"})
    try:
        with private_redis() as (redis_url, redis_pid), tempfile.TemporaryDirectory() as tmp:
            shutil.copy(PLAYBOOKS, Path(tmp) / "drain_playbooks.py")
            run = Run(args, cluster.url, cluster.pid, redis_url, redis_pid, python, Path(tmp))
            try:
                rounds(run, results)
            finally:
                run.stop_all()
    except Exception:
        traceback.print_exc()
        results["error"] = traceback.format_exc()
        status = 1
    finally:
        cluster.stop()
    results["loadavg_end"] = list(os.getloadavg())
    procs.write_report(args.out, results)
    print(table(results["summary"]))
    print(f"load average at start {results['loadavg_start']}, at end {results['loadavg_end']}")
    bad = [r for r in results["runs"] if not r.get("ok")]
    return status or (1 if bad else 0)


if __name__ == "__main__":
    sys.exit(main())
