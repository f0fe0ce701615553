"""Drain benchmark: how fast Celery workers empty the inbox, and how late events finish.

Against a fresh PostgreSQL database and Redis database 9 (flushed), on 127.0.0.1:
1. the inbox's drain: --events pending events of a no-op playbook (``bench-noop``) drained
   by ``celery -A workers.app worker -Q inbox`` at each --concurrency, from the first
   doorbell (one ``inbox.drain`` message) to the last ``finished_at``;
2. raw Celery on the same broker: as many no-op messages (one Redis INCR each) consumed by
   a bare app (``raw_app``), acks_late with prefetch 1 (as ``workers/app.py``) and with
   Celery's default, from telling the idle worker to consume to the last task;
3. end to end: the web server's receiver (the doorbell rings), one worker --concurrency 2
   and beat; signed events open-loop at --rate/s for --seconds; ``finished_at -
   received_at`` per event. With --repeats N, the window with the lowest p99 of N.
Each measurement first waits (up to --quiet-wait s) for the machine to be under 25% busy;
runs where other processes took over 15% of it are marked contended. Prints a table and
the targets, writes bench/results/drain.json; exits non-zero only on a crash. Workers
import this module: ``INBOX_PLAYBOOKS=bench.drain`` (the no-op playbook); raw Celery's app is
``bench.common.baselines:raw_app``. The drain beside the PostgreSQL queues (pgqueuer,
procrastinate, DBOS), with an effect and without: ``bench.drain_peers``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import redis
from celery import Celery
from sqlalchemy import create_engine

from bench.common import baselines as raw
from bench.common import cpu, load, procs
from bench.drain_playbooks import fill_pending
from dev import pgbouncer
from inbox import Playbook, StepContext, register
from inbox.domain.sources import SourceOptions
from inbox.store.db.engine import sqlalchemy_url
from inbox.store.write import sources as store

TENANT, SECRET, EVENT_TYPE = "bench", "bench-drain-secret", "bench.noop"
TARGET_RATIO, TARGET_RATE, TARGET_P99_MS = 2.0, 2000.0, 250.0
INBOX = "inbox drain"
POOLED = "inbox drain via pgbouncer"  # --pgbouncer
RAW_VARIANTS = (("acks_late, prefetch=1", 1), ("acks_late, prefetch=4 default", 4))

# -- what the workers load ---------------------------------------------------------------

noop = Playbook("bench-noop")


@noop.step("noop", effect=False)
def nothing(ctx: StepContext) -> dict[str, Any]:
    return {}


register(noop, event_type=EVENT_TYPE)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = p.add_argument
    add("--events", type=int, default=20_000, help="pending events / raw messages")
    add("--repeats", type=int, default=1, help="throughput runs per configuration (best is shown)")
    add("--concurrency", default="1,2", help="worker --concurrency levels")
    add("--batch-size", type=int, default=None, help="INBOX_BATCH_SIZE (default 100)")
    add("--rate", type=float, default=200.0, help="end-to-end: events per second")
    add("--seconds", type=float, default=20.0, help="end-to-end: measured window")
    add("--warmup", type=float, default=3.0, help="end-to-end: unrecorded warm-up")
    add("--sweep-seconds", type=int, default=30, help="end-to-end: beat's sweep")
    quiet = "before each measurement, wait up to this long for the machine to be < 25%% busy"
    add("--quiet-wait", type=float, default=180.0, help=quiet)
    add("--skip", default="", help="comma-separated phases to skip: inbox,raw,e2e")
    pooled = "also the inbox's drain through a private pgbouncer in transaction mode"
    add("--pgbouncer", action="store_true", help=pooled + " (INBOX_DB_POOLER), as a ratio")
    server = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    maintenance = "a maintenance database on the server where the run's database is created"
    add("--pg-url", default=server, help=maintenance)
    own = "broker, flushed between phases (default: a redis-server of the run's own; never"
    add("--redis-url", default=None, help=own + " a shared one: other work uses it)")
    add("--out", type=Path, default=procs.RESULTS / "drain.json", help="JSON results")
    add(
        "--sealed",
        action="store_true",
        help="seal the pending events' payloads first (`inbox payloads seal`): the workers"
        " open each body and seal each step result and decision",
    )
    return p.parse_args(argv)


class Bench:
    """The run's shared state: database, sources, broker, and every process it started."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        # The payloads' key store beside the run's database, as deployed (INBOX_KEYSTORE_URL):
        # without one, `inbox payloads seal` (--sealed) has nowhere to keep keys.
        self.keys_name, self.keys_url = procs.empty_database(args.pg_url, "inbox_bench_keys")
        self.dbname, self.url = procs.create_database(args.pg_url)
        engine = create_engine(sqlalchemy_url(self.url))
        options = SourceOptions.from_dict({"playbook": noop.name})
        with engine.begin() as conn:  # one tenant; every source runs the no-op playbook
            store.create_tenant(conn, TENANT)
            self.sources = {"noop": store.create_source(conn, TENANT, "noop", "none", [], options)}
            for name in ["warm", *(f"e2e-{i}" for i in range(args.repeats))]:
                src = store.create_source(conn, TENANT, name, "hmac", [SECRET], options)
                self.sources[name] = src
        engine.dispose()
        self.postmaster = cpu.postmaster_of(self.url)
        self.own_redis = procs.PrivateRedis("drain-redis") if args.redis_url is None else None
        if self.own_redis is not None:
            args.redis_url = self.own_redis.url
        self.redis = redis.Redis.from_url(args.redis_url)
        self.redis.flushdb()
        self.redis_pid = int(self.redis.info("server")["process_id"])
        self.ctl = Celery("bench_ctl", broker=args.redis_url)
        self.ctl.conf.broker_connection_retry_on_startup = True
        raw.raw_app.conf.broker_url = args.redis_url  # this process only sends to it
        self.started: list[procs.Proc] = []
        self.bouncer = pgbouncer.PgBouncer(self.url) if args.pgbouncer else None

    def env(self, **extra: str) -> dict[str, str]:
        redis_url, batch = self.args.redis_url, self.args.batch_size
        env = {"DATABASE_URL": self.url, "REDIS_URL": redis_url, "BROKER_URL": ""}
        env["INBOX_KEYSTORE_URL"] = self.keys_url
        env |= {"BENCH_BROKER_URL": redis_url, "INBOX_PLAYBOOKS": "bench.drain"}
        env["PYTHONPATH"] = str(procs.ROOT)
        return env | ({"INBOX_BATCH_SIZE": str(batch)} if batch else {}) | extra

    def start(self, proc: procs.Proc) -> procs.Proc:
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        while self.started:
            self.started.pop().stop()

    def close(self) -> None:
        self.stop_all()
        if self.own_redis is not None:
            self.own_redis.stop()
        procs.drop_database(self.args.pg_url, self.keys_name)


def _progress(conn: psycopg.Connection, source_id: int | None = None) -> tuple[int, float]:
    """(events completed or quarantined, epoch of the latest finished_at)."""
    where = "" if source_id is None else f" WHERE source_id = {int(source_id)}"
    done = "count(*) FILTER (WHERE state IN ('completed', 'quarantined'))"
    sql = f"SELECT {done}, coalesce(extract(epoch FROM max(finished_at)), 0) FROM events{where}"
    row = conn.execute(sql).fetchone()
    return (int(row[0]), float(row[1])) if row else (0, 0.0)


def _states(conn: psycopg.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT state, count(*) FROM events GROUP BY state").fetchall())


# -- 1 and 2. throughput: the inbox's drain and raw Celery -------------------------------


def _timed(
    b: Bench,
    worker: procs.Proc,
    kick: Callable[[], None],
    wait: Callable[[], float],
    pg: bool,
    extra: dict[str, int] | None = None,
    ready: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """On an idle worker and a quiet machine: ``kick``, ``wait`` for the epoch of the last
    completion. The rate; CPU seconds of the worker's tree, this process, redis-server,
    PostgreSQL (``pg``: the run's database's backends, this process's included), the
    machine and ``other``; the worker's and PostgreSQL's per event."""
    procs.wait_celery(b.ctl, worker)
    if ready is not None:  # untimed: what the kick finds (the events made due)
        ready()
    quiet = cpu.wait_quiet(b.args.quiet_wait)
    trees = {"process": worker.pid, "bench": os.getpid(), "redis": b.redis_pid, **(extra or {})}
    sampler = cpu.Sampler(trees, b.postmaster if pg else None, b.dbname, private=False)
    before, started, t0 = sampler.sample(), time.monotonic(), time.time()
    kick()
    seconds = wait() - t0
    used = cpu.window(before, sampler.sample(), 1.0)
    capacity = (time.monotonic() - started) * (os.cpu_count() or 1)
    worker.stop()
    b.started.remove(worker)
    usage = {f"{k}_cpu_s": round(v, 2) for k, v in used.items() if k != "machine"}
    usage |= {"machine_busy_s": round(used["machine"], 2), "machine_capacity_s": round(capacity, 2)}
    n = b.args.events
    for k in ("process", "postgres"):
        if f"{k}_cpu_s" in usage:
            usage[f"{k}_cpu_ms_per_event"] = round(usage[f"{k}_cpu_s"] / n * 1000, 3)
    rate = {"events": n, "seconds": round(seconds, 3), "per_s": round(n / seconds, 1)}
    return rate | quiet | usage


def run_inbox(b: Bench, concurrency: int, pooled: bool = False) -> dict[str, Any]:
    """The inbox's drain; ``pooled``: its workers through ``b.bouncer`` (pgbouncer's CPU
    counted apart)."""
    n, src = b.args.events, b.sources["noop"]
    rerings: list[dict[str, Any]] = []
    with psycopg.connect(b.url, autocommit=True) as conn:
        conn.execute("TRUNCATE events CASCADE")
        fill_pending(conn, src.tenant_id, src.id, n, f"evt_c{concurrency}_", EVENT_TYPE)
        if b.args.sealed:  # untimed: the rows as a receiver with sealing on writes them
            subprocess.run(
                [sys.executable, "-m", "inbox.cli", "payloads", "seal", "--batch", "2000"],
                env={**os.environ, **b.env()},
                cwd=procs.ROOT,
                check=True,
                capture_output=True,
            )
        # Not due until the clock starts: a worker rings its own doorbell when it starts
        # (workers/app.py), and would drain them before the kick.
        conn.execute("UPDATE events SET available_at = 'infinity'")
        b.redis.flushdb()

        def due() -> None:
            conn.execute("UPDATE events SET available_at = now()")

        def ring() -> None:
            b.ctl.send_task("inbox.drain", queue="inbox")

        def ring_again(done: int) -> None:
            """The chain of drain tasks ended early: ring once more, as beat's sweep would."""
            if len(rerings) >= 3:
                raise RuntimeError(f"drain stalled at {done}/{n} events: {_states(conn)}")
            rerings.append({"at_finished": done, "states": _states(conn)})
            print(f"    stalled at {done}/{n} {rerings[-1]['states']}: ringing again", flush=True)
            ring()

        def drained() -> float:
            procs.wait_progress(lambda: _progress(conn)[0], n, "drain", ring_again)
            return _progress(conn)[1]

        tag, env, extra = f"inbox-c{concurrency}", b.env(), {}
        if pooled and b.bouncer is not None:
            tag += "-pgbouncer"
            env |= {"DATABASE_URL": b.bouncer.url(b.url), "INBOX_DB_POOLER": "transaction"}
            extra = {"pgbouncer": b.bouncer.proc.pid}
        worker = b.start(procs.celery_worker("workers.app", "inbox", concurrency, env, tag))
        run = _timed(b, worker, ring, drained, pg=True, extra=extra, ready=due)
        states = _states(conn)
    system = POOLED if pooled else INBOX
    head = {"system": system, "app": "workers.app", "concurrency": concurrency}
    done = {k: states.get(k, 0) for k in ("completed", "quarantined")}
    return {**head, **run, **done, "rerings": rerings}


def run_raw(b: Bench, concurrency: int, label: str, prefetch: int) -> dict[str, Any]:
    n = b.args.events
    b.redis.flushdb()
    with raw.raw_app.producer_or_acquire() as producer:
        for _ in range(n):
            raw.raw_noop.apply_async(args=(n,), queue=raw.RAW_QUEUE, producer=producer)
    env = b.env(BENCH_RAW_PREFETCH=str(prefetch))
    tag = f"raw-c{concurrency}"
    app = "bench.common.baselines:raw_app"
    worker = b.start(procs.celery_worker(app, raw.RAW_IDLE_QUEUE, concurrency, env, tag))
    control: Any = b.ctl.control

    def kick() -> None:
        control.add_consumer(raw.RAW_QUEUE, destination=[worker.node], reply=True, timeout=5)

    def finished() -> float:
        counter, last = raw.RAW_COUNTER, raw.RAW_FINISHED

        def done() -> int:  # the last task counts itself, then records the time
            return n if b.redis.exists(last) else int(b.redis.get(counter) or 0)

        procs.wait_progress(done, n, "raw celery")
        return float(b.redis.get(last) or 0)

    run = _timed(b, worker, kick, finished, pg=False)
    head = {"system": f"raw celery ({label})", "concurrency": concurrency, **run}
    completed = int(b.redis.get(raw.RAW_COUNTER) or 0)
    return {**head, "completed": completed, "acks_late": True, "prefetch": prefetch}


# -- 3. end-to-end latency ---------------------------------------------------------------

_LATENCY = """
    SELECT count(*), percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY ms),
           max(ms), count(*) FILTER (WHERE ms >= %(target)s)
      FROM (SELECT extract(epoch FROM finished_at - received_at) * 1000 AS ms FROM events
             WHERE source_id = %(source)s AND state = 'completed') lat
"""


def _send(b: Bench, conn: psycopg.Connection, port: int, name: str, seconds: float) -> Any:
    """Send at --rate for ``seconds`` to source ``name``, then wait for its events."""
    src = b.sources[name]
    client = load.paced(port, src.path, b.args.rate, seconds, name, SECRET, EVENT_TYPE)
    procs.wait_progress(lambda: _progress(conn, src.id)[0], client["statuses"].get("202", 0), name)
    return client


def _window(b: Bench, conn: psycopg.Connection, port: int, name: str) -> dict[str, Any]:
    """One measured window, on a quiet machine: client figures and database latency."""
    quiet = cpu.wait_quiet(b.args.quiet_wait)
    client = _send(b, conn, port, name, b.args.seconds)
    row = conn.execute(_LATENCY, {"source": b.sources[name].id, "target": TARGET_P99_MS})
    count, pct, mx, over = row.fetchone() or (0, None, None, 0)
    latency: dict[str, Any] = {"completed": int(count)}
    if count:
        latency |= {f"p{q}_ms": round(p, 1) for q, p in zip((50, 90, 99), pct, strict=True)}
        latency |= {"max_ms": round(float(mx), 1), "over_target": int(over)}
    window = {"rate": b.args.rate, "seconds": b.args.seconds, "client": client}
    return {**quiet, **window, "latency": latency}


def run_e2e(b: Bench) -> dict[str, Any]:
    a = b.args
    with psycopg.connect(b.url, autocommit=True) as conn:
        conn.execute("TRUNCATE events CASCADE")
    b.redis.flushdb()
    env = b.env(INBOX_SWEEP_SECONDS=str(a.sweep_seconds))
    worker = b.start(procs.celery_worker("workers.app", "inbox", 2, env, "e2e-worker"))
    b.start(procs.celery_beat("workers.app", env, "e2e-beat"))
    web, port = procs.web("web.wsgi:app", {**env, "INBOX_DB_POOL_SIZE": "8"}, 2, 8, "e2e-web")
    b.start(web)
    procs.wait_http(web, port)
    procs.wait_celery(b.ctl, worker)
    with psycopg.connect(b.url, autocommit=True) as conn:
        if a.warmup > 0:
            _send(b, conn, port, "warm", a.warmup)
        windows = [_window(b, conn, port, f"e2e-{i}") for i in range(a.repeats)]
    b.stop_all()
    best = min(windows, key=lambda w: w["latency"].get("p99_ms", float("inf")))
    best["p99_ms_of_every_window"] = [w["latency"].get("p99_ms") for w in windows]
    return best | {"worker_concurrency": 2, "sweep_seconds": a.sweep_seconds}


# -- report ------------------------------------------------------------------------------


def _contended(r: dict[str, Any]) -> bool:
    """Other processes on the machine took more than 15% of its CPU during the run."""
    return bool(r.get("other_cpu_s", 0) > 0.15 * max(r.get("machine_capacity_s", 0), 1e-9))


HEAD = ["system", "procs", "best ev/s", "median", "seconds", "proc cpu ms/ev", "pg cpu ms/ev"]
HEAD += ["machine busy", "other cpu s"]
WIDTHS = [42, 5, 9, 9, 8, 14, 12, 12, 12]


def _row(cells: list[str]) -> str:
    pairs = enumerate(zip(cells, WIDTHS, strict=True))
    return "  ".join(s.ljust(w) if i == 0 else s.rjust(w) for i, (s, w) in pairs)


def _cells(r: dict[str, Any]) -> list[str]:
    pg = r.get("postgres_cpu_ms_per_event")
    busy = f"{r['machine_busy_s'] / max(r['machine_capacity_s'], 1e-9) * 100:.0f}%"
    return [
        *(r["system"], str(r["concurrency"]), f"{r['per_s']:,.0f}"),
        f"{r.get('median_per_s', r['per_s']):,.0f}",
        f"{r['seconds']:.2f}{'!' if r.get('rerings') else ''}",
        *(f"{r['process_cpu_ms_per_event']:.3f}", "-" if pg is None else f"{pg:.3f}", busy),
        f"{r.get('other_cpu_s', 0):.1f}{'*' if _contended(r) else ''}",
    ]


def _e2e_lines(e: dict[str, Any]) -> list[str]:
    cl, lat, every = e["client"], e["latency"], e["p99_ms_of_every_window"]
    got = {k: lat.get(k) for k in ("completed", "p50_ms", "p90_ms", "p99_ms", "max_ms")}
    return [
        f"End-to-end (web server 2x8 -> PostgreSQL -> doorbell -> 1 celery worker "
        f"--concurrency 2, beat sweep {e['sweep_seconds']} s); the window with the lowest p99 "
        f"of {len(every)} (p99s: {every} ms):",
        f"  {e['rate']:.0f}/s offered for {e['seconds']:.0f} s: sent {cl['sent']} at "
        f"{cl['offered_per_s']}/s, statuses {cl['statuses']}, HTTP p50 {cl['http_p50_ms']} ms "
        f"p99 {cl['http_p99_ms']} ms",
        "    received_at -> finished_at: completed {completed}  p50 {p50_ms} ms  p90 {p90_ms} ms"
        "  p99 {p99_ms} ms  max {max_ms} ms".format(**got)
        + f"  (>= {TARGET_P99_MS:.0f} ms: {lat.get('over_target')})",
    ]


def report(results: dict[str, Any]) -> None:
    runs = results["throughput"]
    lines = [f"Drain throughput ({results['config']['events']:,} events, no-op playbook):"]
    lines += [_row(HEAD), _row(["-" * w for w in WIDTHS]), *(_row(_cells(r)) for r in runs)]
    if any(_contended(r) for r in runs):
        lines.append("* contended: other processes took > 15% of the machine's CPU during the run")
    if any(r.get("rerings") for r in runs):
        lines.append("! the chain of drain tasks stopped with events left; rung again (see JSON)")
    lines.append("events/s: best of the repeats; cpu and seconds are those of the best run")
    for c, ratio in results.get("pgbouncer_ratios", {}).items():
        lines.append(f"{POOLED} / {INBOX} at concurrency {c}: {ratio}x events/s")
    lines += ["", *_e2e_lines(results["e2e"])] if "e2e" in results else []
    lines += ["", "Targets:"]
    for t in results["targets"]:
        lines.append(f"  [{'MET' if t['met'] else 'NOT MET'}] {t['target']}: {t['value']}")
    print("\n".join(lines))


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    best = {(r["system"], r["concurrency"]): r for r in results["throughput"]}
    inbox, raw = best.get((INBOX, 2)), best.get((f"raw celery ({RAW_VARIANTS[0][0]})", 2))
    judged: list[tuple[str, float, bool]] = []
    if inbox and raw:
        ratio = round(inbox["per_s"] / raw["per_s"], 2)
        name = f"{INBOX} (2 procs) >= {TARGET_RATIO:.0f}x raw celery ({RAW_VARIANTS[0][0]}"
        judged.append((f"{name}, 2 procs)", ratio, ratio >= TARGET_RATIO))
    if inbox:
        name, rate = f"{INBOX} (2 procs) >= {TARGET_RATE:,.0f} events/s", inbox["per_s"]
        judged.append((name, rate, rate >= TARGET_RATE))
    if (e2e := results.get("e2e")) and (p99 := e2e["latency"].get("p99_ms")) is not None:
        name = f"end-to-end p99 < {TARGET_P99_MS:.0f} ms at {e2e['rate']:.0f}/s"
        judged.append((name, p99, p99 < TARGET_P99_MS))
    return [{"target": name, "value": value, "met": met} for name, value, met in judged]


# -- main --------------------------------------------------------------------------------


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per system and concurrency: the best of the repeats, with the median beside it."""
    out = []
    for key in dict.fromkeys((r["system"], r["concurrency"]) for r in runs):
        group = [r for r in runs if (r["system"], r["concurrency"]) == key]
        rates = [r["per_s"] for r in group]
        best = max(group, key=lambda r: r["per_s"])
        out.append(best | {"repeats": len(group), "median_per_s": statistics.median(rates)})
        out[-1]["all_per_s"] = rates
    return out


def run_phases(b: Bench, results: dict[str, Any], skip: set[str]) -> None:
    levels = [int(n) for n in b.args.concurrency.split(",") if n.strip()]
    plan = [partial(run_inbox, b, n) for n in levels if "inbox" not in skip]
    if b.bouncer is not None and "inbox" not in skip:
        plan += [partial(run_inbox, b, n, True) for n in levels]
    for label, prefetch in RAW_VARIANTS if "raw" not in skip else ():
        plan += [partial(run_raw, b, n, label, prefetch) for n in levels]
    every = results["throughput_all"]
    for repeat in range(b.args.repeats):
        for run in plan:
            every.append({**run(), "repeat": repeat})
            results["throughput"] = summarize(every)
            r = every[-1]
            print(f"  {r['system']} c={r['concurrency']}: {r['per_s']:,.0f}/s", flush=True)
    if "e2e" not in skip:
        results["e2e"] = run_e2e(b)
        print(f"  end-to-end: {results['e2e']['latency']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    procs.use_own_kek()
    a = parse_args(argv)
    config = {k: getattr(a, k) for k in ("events", "repeats", "concurrency", "rate", "seconds")}
    config |= {"sweep_seconds": a.sweep_seconds, "batch_size": a.batch_size or 100}
    config |= {"sealed": a.sealed}
    host = {"python": platform.python_version(), "cpus": os.cpu_count()}
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": host | {"platform": platform.platform()},
        "config": config | {"broker": a.redis_url},
        "throughput": [],
        "throughput_all": [],
    }
    status = 0
    b = Bench(a)
    try:
        print(f"database {b.dbname}; logs in {procs.LOGS}", flush=True)
        run_phases(b, results, {s.strip() for s in a.skip.split(",")})
    except Exception:
        traceback.print_exc()
        results["error"] = traceback.format_exc()
        status = 1
    finally:
        if b.bouncer is not None:
            b.bouncer.stop()
        b.ctl.close()
        b.redis.flushdb()
        b.close()
        procs.drop_database(a.pg_url, b.dbname)
    results["targets"] = targets(results)
    best = {(r["system"], r["concurrency"]): r["per_s"] for r in results["throughput"]}
    results["pgbouncer_ratios"] = {
        c: round(best[(POOLED, c)] / best[(INBOX, c)], 2)
        for (system, c) in best
        if system == POOLED and best.get((INBOX, c))
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=2) + "\n")
    report(results)
    print(f"\nwrote {a.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
