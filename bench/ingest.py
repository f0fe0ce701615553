"""Ingest benchmark: Webhook Inbox's receiver against a naive hand-written one.

Both receivers run one after the other under the project's web server (``python -m web``,
as the Procfile runs it) with identical settings, against the same fresh PostgreSQL
database, and are driven the same way: signed 1 KiB JSON events, each with a unique
Idempotency-Key, from 8, 32 and 64 concurrent senders (closed loop, keep-alive
connections), a warm-up then a fixed measured window. The server runs without
REDIS_URL / BROKER_URL, so the real receiver's doorbell is a no-op and ingest alone is
measured.

    .venv/bin/python bench/ingest.py --seconds 10

Prints receiver / senders / accepted/s / p50 / p99 / errors, the real/naive ratios, and
whether the targets are met (>= 1.0x naive throughput and p99 < 50 ms at 32 senders);
writes everything to bench/results/ingest.json. It also checks that the real receiver
stored exactly one ``events`` row per 202 it answered. The exit status is non-zero only
when the benchmark itself fails, never for a missed target.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _cpu
import _load
import _speed
import _wrk
import psycopg
from _drain_procs import free_port, web_args

from inbox.infra.config import Settings
from web import serve
from web.keepalive import keepalive_requests

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
SECRET = "benchsecret"
TENANT, SOURCE = "bench", "own"
HOST = "127.0.0.1"
APPS = {"real": "web.wsgi:app", "naive": "naive_receiver:app"}
TARGET_SENDERS = 32
TARGET_RATIO = 1.0
TARGET_P99_MS = 50.0
# More cores than this not attributed to the receiver, PostgreSQL or the load generator
# marks a window as disturbed (the kernel's share of a connection per request is ~0.2).
NOISE_CORES = 0.3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=10.0, help="measured window per level")
    p.add_argument("--warmup", type=float, default=2.0, help="unrecorded warm-up per level")
    p.add_argument("--senders", default="8,32,64", help="comma-separated concurrency levels")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run all receivers this many times, alternating; targets judged on the medians",
    )
    p.add_argument("--receivers", default="real,naive", help="which receivers, in order")
    # The web server's defaults (web/serve.py): one worker per core, 24 threads.
    deployed = serve.server_settings(os.environ)
    p.add_argument(
        "--workers",
        type=int,
        default=deployed.workers,
        help="web worker processes (both receivers; default as deployed)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=deployed.threads,
        help="threads per web worker (both receivers; default as deployed)",
    )
    p.add_argument(
        "--keepalive-requests",
        type=int,
        default=keepalive_requests(os.environ),
        help="WEB_KEEPALIVE_REQUESTS for both receivers (default as deployed)",
    )
    p.add_argument(
        "--pool-size",
        type=int,
        default=None,
        help="INBOX_DB_POOL_SIZE per worker process of the real receiver (default as deployed)",
    )
    p.add_argument(
        "--load-procs",
        type=int,
        default=None,
        help="load-generator processes per level (default: about 8 senders each, max 8)",
    )
    p.add_argument(
        "--load",
        choices=("auto", "wrk", "python"),
        default="auto",
        help="load generator: wrk (C, when installed; auto) or the Python one in _load.py",
    )
    p.add_argument("--port", type=int, default=0, help="receiver port (default: a free one)")
    p.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="a maintenance database on the server where the run's database is created",
    )
    p.add_argument("--keep-db", action="store_true", help="do not drop the run's database")
    p.add_argument("--out", type=Path, default=RESULTS / "ingest.json", help="JSON results")
    args = p.parse_args(argv)
    args.sender_levels = [int(s) for s in args.senders.split(",") if s.strip()]
    args.receiver_list = [r.strip() for r in args.receivers.split(",") if r.strip()]
    unknown = set(args.receiver_list) - set(APPS)
    if unknown:
        p.error(f"unknown receiver(s): {', '.join(sorted(unknown))}")
    if args.load == "auto":
        args.load = "wrk" if _wrk.available() else "python"
    elif args.load == "wrk" and not _wrk.available():
        p.error("wrk is not installed (apt-get install wrk)")
    if args.pool_size is None:  # as deployed
        args.pool_size = int(os.environ.get("INBOX_DB_POOL_SIZE") or Settings.pool_size)
    return args


# -- the database -----------------------------------------------------------------------


def _with_db(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    return base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")


def create_database(pg_url: str) -> tuple[str, str]:
    name = f"inbox_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _with_db(pg_url, name)
    from inbox.store import migrate

    migrate.upgrade(url)
    return name, url


def drop_database(pg_url: str, name: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_source(db_url: str) -> None:
    """The tenant and its ``hmac`` source, through the project's own CLI."""
    inbox = [sys.executable, "-m", "inbox.cli"]
    env = {**os.environ, "DATABASE_URL": db_url}
    source = ["--tenant", TENANT, "--name", SOURCE, "--scheme", "hmac", "--secret", SECRET]
    for cmd in (["tenants", "create", TENANT], ["sources", "create", *source]):
        subprocess.run(inbox + cmd, env=env, cwd=ROOT, check=True, capture_output=True)


def count_rows(db_url: str, sql: str) -> int:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0


def checkpoint(db_url: str) -> None:
    """Flush dirty pages between levels, so no level pays for the previous one's writes."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def postmaster_pid(db_url: str) -> int | None:
    """The PostgreSQL server's postmaster, when it runs on this machine (else None)."""
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        # Read while the backend is alive: its parent is the postmaster.
        return _cpu.parent_of(int(row[0])) if row else None


def server_info(db_url: str) -> dict[str, str]:
    with psycopg.connect(db_url) as conn:
        out = {}
        for setting in ("server_version", "max_connections", "synchronous_commit", "fsync"):
            row = conn.execute(f"SHOW {setting}").fetchone()
            out[setting] = str(row[0]) if row else ""
    return out


# -- the web server ---------------------------------------------------------------------


def settings_line(args: argparse.Namespace) -> str:
    return f"python -m web --workers {args.workers} --threads {args.threads}"


class Receiver:
    """One web server (``python -m web``, as the Procfile runs it) we started and stop."""

    def __init__(self, name: str, args: argparse.Namespace, db_url: str, port: int) -> None:
        self.name = name
        self.port = port
        # No broker: the real receiver's doorbell is then a no-op (ingest alone is measured),
        # and the config file makes a private Prometheus multiprocess directory.
        scrub = {"REDIS_URL", "BROKER_URL", "PROMETHEUS_MULTIPROC_DIR"}
        env = {
            **{k: v for k, v in os.environ.items() if k not in scrub},
            "DATABASE_URL": db_url,
            "INBOX_DB_POOL_SIZE": str(args.pool_size),
            "NAIVE_SECRET": SECRET,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(BENCH),  # for the naive receiver's module
            "WEB_KEEPALIVE_REQUESTS": str(args.keepalive_requests),
        }
        self.cmd = web_args(APPS[name], port, args.workers, args.threads)
        self.log_path = RESULTS / f"web-{name}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.cmd, env=env, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until a worker answers HTTP (any status: the naive app has no health route)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} receiver exited; see {self.log_path}")
            conn = http.client.HTTPConnection(HOST, self.port, timeout=2)
            try:
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                return
            except OSError:
                time.sleep(0.2)
            finally:
                conn.close()
        raise RuntimeError(f"{self.name} receiver did not answer within {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# -- one receiver, every level ---------------------------------------------------------


def drive(name: str, args: argparse.Namespace, db_url: str, run_tag: str) -> list[dict[str, Any]]:
    port = args.port or free_port()
    receiver = Receiver(name, args, db_url, port)
    levels = []
    try:
        receiver.wait_ready()
        sampler = _cpu.Sampler(
            {"receiver": receiver.proc.pid, "load": os.getpid()},
            postmaster_pid(db_url),
            db_url.rsplit("/", 1)[1].split("?")[0],
        )
        for senders in args.sender_levels:
            checkpoint(db_url)

            def probe() -> dict[str, Any]:
                return {
                    "cpu": sampler.sample(),
                    "connections": _cpu.connections_by_process(receiver.proc.pid, port),
                }

            level = _load.Level(
                HOST,
                port,
                f"/hooks/{TENANT}/{SOURCE}",
                SECRET.encode(),
                senders,
                args.seconds,
                args.warmup,
                tag=f"{run_tag}-{name}-{senders}",
            )
            if args.load == "wrk":
                result = _wrk.run_level(level, RESULTS, probe=probe)
            else:
                result = _load.run_level(level, procs=args.load_procs, probe=probe)
            result["receiver"] = name
            add_cpu(result)
            levels.append(result)
            other = result.get("cpu_cores", {}).get("other", math.nan)
            split = "/".join(str(n) for n in result.get("connections_per_worker", [])) or "n/a"
            print(
                f"  {name:5} {senders:3} senders: {result['accepted_per_s']:8.1f} accepted/s"
                f"  p50 {result['p50_ms']:6.1f} ms  p99 {result['p99_ms']:6.1f} ms"
                f"  errors {result['errors']}  (other processes: {_fmt(other, 2)} cores;"
                f" connections per worker: {split})",
                flush=True,
            )
    finally:
        receiver.stop()
    return levels


def background_cores(seconds: float = 1.0) -> float:
    """Cores busy before the run starts: anything else competing for the machine."""
    before = _cpu.machine_busy()
    time.sleep(seconds)
    return (_cpu.machine_busy() - before) / seconds


def add_cpu(result: dict[str, Any]) -> None:
    """Cores used by each component over the window, and CPU ms per accepted event."""
    probe = result.pop("probe")
    if not probe:
        return
    # Keep-alive connections held by each worker when the window opened, largest first.
    result["connections_per_worker"] = sorted(probe[0]["connections"].values(), reverse=True)
    cores = _cpu.window(probe[0]["cpu"], probe[1]["cpu"], result["seconds"])
    result["cpu_cores"] = cores
    accepted = result["accepted"]
    result["cpu_ms_per_accepted"] = {
        k: (v * result["seconds"] * 1000 / accepted) if accepted else math.nan
        for k, v in cores.items()
    }


def verify_rows(name: str, db_url: str, levels: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows stored == 202s answered, over the whole run of one receiver (warm-ups included).

    With wrk, requests in flight when it stops may be stored unanswered: then rows may
    exceed the 202s by at most one per connection per wrk run, and never fall short.
    """
    answered = sum(level["total_statuses"].get("202", 0) for level in levels)
    unanswered = sum(level["total_statuses"].get("0", 0) for level in levels)
    slack = sum(level.get("in_flight_at_stop_max", 0) for level in levels)
    if name == "real":
        sql = (
            "SELECT count(*) FROM events e JOIN sources s ON s.id = e.source_id"
            f" JOIN tenants t ON t.id = s.tenant_id WHERE t.name = '{TENANT}'"
            f" AND s.name = '{SOURCE}'"
        )
    else:
        sql = "SELECT count(*) FROM naive_events"
    stored = count_rows(db_url, sql)
    return {
        "answered_202": answered,
        "rows": stored,
        "transport_errors": unanswered,
        "unanswered_in_flight_max": slack,
        "ok": answered <= stored <= answered + slack,
    }


# -- report ----------------------------------------------------------------------------


def _fmt(value: float, digits: int = 1) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def _median(values: list[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def compare(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """real/naive per run and level; with several runs, also their medians (run 0)."""
    by = {(lv.get("run", 1), lv["receiver"], lv["senders"]): lv for lv in levels}
    runs = sorted({lv.get("run", 1) for lv in levels})
    out = []
    for senders in sorted({lv["senders"] for lv in levels}):
        mine = []
        for run in runs:
            real, naive = by.get((run, "real", senders)), by.get((run, "naive", senders))
            if real is None or naive is None:
                continue
            mine.append(
                {
                    "run": run,
                    "senders": senders,
                    "throughput_ratio": _ratio(real["accepted_per_s"], naive["accepted_per_s"]),
                    "p99_ratio": _ratio(real["p99_ms"], naive["p99_ms"]),
                }
            )
        out.extend(mine)
        if len(mine) > 1:
            out.append(
                {
                    "run": 0,
                    "senders": senders,
                    "throughput_ratio": _median([r["throughput_ratio"] for r in mine]),
                    "p99_ratio": _median([r["p99_ratio"] for r in mine]),
                }
            )
    return out


def targets(levels: list[dict[str, Any]], ratios: list[dict[str, Any]]) -> dict[str, Any]:
    """Judged at TARGET_SENDERS on the medians over the runs (one run: its own figures)."""
    mine_levels = [
        lv for lv in levels if lv["receiver"] == "real" and lv["senders"] == TARGET_SENDERS
    ]
    p99s = [lv["p99_ms"] for lv in mine_levels]
    mine = [r for r in ratios if r["senders"] == TARGET_SENDERS]
    per_run = [r["throughput_ratio"] for r in mine if r["run"] != 0]
    ratio = _median(per_run) if per_run else None
    p99 = _median(p99s) if p99s else None
    return {
        "senders": TARGET_SENDERS,
        "runs": max(len(p99s), len(per_run)),
        "throughput_ratio_min": TARGET_RATIO,
        "throughput_ratio": ratio,
        "throughput_ratios": per_run,
        "throughput_met": None if ratio is None else ratio >= TARGET_RATIO,
        "p99_ms_max": TARGET_P99_MS,
        "p99_ms": p99,
        "p99s_ms": p99s,
        "p99_met": None if p99 is None else p99 < TARGET_P99_MS,
        "p99_runs_met": sum(1 for v in p99s if v < TARGET_P99_MS),
        "speed_probes_us": [lv.get("speed_probe_us") for lv in mine_levels],
    }


def _verdict(met: bool | None) -> str:
    return "not measured" if met is None else ("MET" if met else "NOT MET")


def print_report(report: dict[str, Any]) -> None:
    levels, ratios, tgt = report["levels"], report["ratios"], report["targets"]
    print()
    head = ("run", "receiver", "senders", "accepted/s", "p50 ms", "p99 ms", "errors")
    print("{:>3} {:8} {:>7} {:>11} {:>8} {:>8} {:>7}".format(*head))
    for lv in levels:
        print(
            f"{lv.get('run', 1):3d} {lv['receiver']:8} {lv['senders']:7d}"
            f" {lv['accepted_per_s']:11.1f} {_fmt(lv['p50_ms']):>8} {_fmt(lv['p99_ms']):>8}"
            f" {lv['errors']:7d}"
        )
    print_cpu(levels)
    if ratios:
        print()
        print(f"{'run':>6} {'senders':>7} {'real/naive accepted/s':>22} {'real/naive p99':>15}")
        for r in ratios:
            run = "median" if r["run"] == 0 else str(r["run"])
            print(
                f"{run:>6} {r['senders']:7d} {_fmt(r['throughput_ratio'], 2) + 'x':>22}"
                f" {_fmt(r['p99_ratio'], 2) + 'x':>15}"
            )
    print()
    print(
        f"target: real >= {TARGET_RATIO:.1f}x naive accepted/s at {TARGET_SENDERS} senders:"
        f" {_verdict(tgt['throughput_met'])}"
        + (f" ({_fmt(tgt['throughput_ratio'], 2)}x)" if tgt["throughput_ratio"] is not None else "")
    )
    print(
        f"target: real p99 < {TARGET_P99_MS:.0f} ms at {TARGET_SENDERS} senders:"
        f" {_verdict(tgt['p99_met'])}"
        + (f" ({_fmt(tgt['p99_ms'])} ms)" if tgt["p99_ms"] is not None else "")
    )
    if tgt["runs"] > 1:
        print(
            f"  (medians over {tgt['runs']} runs; p99 per run: "
            + ", ".join(_fmt(v) for v in tgt["p99s_ms"])
            + f" ms, under {TARGET_P99_MS:.0f} in {tgt['p99_runs_met']})"
        )
    probes = [v for v in tgt.get("speed_probes_us", []) if v is not None]
    if probes:
        print(
            "  (speed probe per CPU before each of those runs, us, lower is faster: "
            + ", ".join(_speed.shown(cpus) for cpus in probes)
            + ")"
        )
    noisy = [
        f"{lv['receiver']}/{lv['senders']}"
        for lv in levels
        if lv.get("cpu_cores", {}).get("other", 0.0) > NOISE_CORES
    ]
    if noisy or report["machine"]["background_cores"] > NOISE_CORES:
        print(
            f"WARNING: other processes used more than {NOISE_CORES} cores"
            f" (before the run: {report['machine']['background_cores']:.2f};"
            f" during: {', '.join(noisy) or 'none'}); the figures are disturbed,"
            " rerun on a quiet machine."
        )
    for name, check in report["correctness"].items():
        verdict = "OK" if check["ok"] else "MISMATCH"
        print(
            f"rows check ({name}): {check['rows']} rows for {check['answered_202']} answered 202"
            f" ({check['transport_errors']} transport errors"
            + (
                f"; up to {check['unanswered_in_flight_max']} may be in flight at wrk's stops"
                if check["unanswered_in_flight_max"]
                else ""
            )
            + f"): {verdict}"
        )


def print_cpu(levels: list[dict[str, Any]]) -> None:
    parts = ("receiver", "postgres", "load", "other", "machine")
    if not any("cpu_cores" in lv for lv in levels):
        return
    print()
    print("CPU per accepted event, ms (cores used on average)")
    print(
        "{:>3} {:8} {:>7} ".format("run", "receiver", "senders")
        + " ".join(f"{p:>16}" for p in parts)
    )
    for lv in levels:
        cores, per = lv.get("cpu_cores"), lv.get("cpu_ms_per_accepted")
        if not cores or not per:
            continue
        cells = [
            f"{_fmt(per.get(p, math.nan), 2)} ({_fmt(cores.get(p, math.nan), 2)})" for p in parts
        ]
        print(
            f"{lv.get('run', 1):3d} {lv['receiver']:8} {lv['senders']:7d} "
            + " ".join(f"{c:>16}" for c in cells)
        )


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    run_tag = uuid.uuid4().hex[:8]
    background = background_cores()
    print(f"cores busy before the run: {background:.2f} of {os.cpu_count()}", flush=True)
    name, db_url = create_database(args.pg_url)
    print(f"database {name}; {settings_line(args)}; load: {args.load}", flush=True)
    try:
        create_source(db_url)
        levels: list[dict[str, Any]] = []
        correctness: dict[str, Any] = {}
        for run in range(1, args.repeats + 1):
            for receiver in args.receiver_list:
                speed = _speed.probe_cpus()  # on the idle machine, before the server starts
                print(
                    f"run {run} {receiver}: speed probe {_speed.shown(speed)} us per CPU",
                    flush=True,
                )
                mine = drive(receiver, args, db_url, f"{run_tag}-r{run}")
                for level in mine:
                    level["run"] = run
                    level["speed_probe_us"] = speed
                levels.extend(mine)
        for receiver in args.receiver_list:  # rows accumulate over the runs
            mine = [lv for lv in levels if lv["receiver"] == receiver]
            correctness[receiver] = verify_rows(receiver, db_url, mine)
        ratios = compare(levels)
        report = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {
                "cpus": os.cpu_count(),
                "background_cores": background,
                "platform": platform.platform(),
                "python": platform.python_version(),
                "postgresql": server_info(db_url),
            },
            "settings": {
                "server": settings_line(args),
                "load_generator": args.load,
                "pool_size_per_worker": args.pool_size,
                "seconds": args.seconds,
                "warmup_seconds": args.warmup,
                "body_bytes": _load.BODY_BYTES,
                "senders": args.sender_levels,
                "repeats": args.repeats,
            },
            "levels": levels,
            "ratios": ratios,
            "targets": targets(levels, ratios),
            "correctness": correctness,
        }
        print_report(report)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(_json_safe(report), indent=2) + "\n")
        print(f"\nwrote {args.out}")
    finally:
        if not args.keep_db:
            drop_database(args.pg_url, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
