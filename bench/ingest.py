"""Ingest benchmark: Webhook Inbox's receiver beside the hand-written one a user would write.

Receivers, each under the project's web server (``python -m web``, the same workers,
threads and pool size), all up at once against one fresh database and loaded in turn:

- ``inbox``: Webhook Inbox (``web.wsgi:app``), without a broker (its doorbell is then a
  no-op: ingest alone is measured);
- ``handwritten``: the baseline (``bench/common/baselines.py``, ``handwritten``): Flask, a psycopg
  pool, one constant-time HMAC check, one INSERT ... ON CONFLICT DO NOTHING RETURNING in
  autocommit;
- ``naive`` (optional, a second labelled row): the same without a pool or a unique key, a
  connection per request;
- ``inbox-otlp`` (``--otlp``): Webhook Inbox with tracing on, exporting OTLP over HTTP
  through the batch span processor to a sink in this process that keeps only counts;
  judged against ``inbox`` (tracing off) in the same runs: the cost of tracing.

Workloads, driven by wrk (``bench/common/load.py``), signed 1 KiB JSON events:

- ``unique``: every request a new Idempotency-Key;
- ``storm``: every second request repeats the previous key, on another connection.

Per receiver and workload: 2xx answers/s, p50/p99, answers by status, CPU ms per 2xx
answer for the receiver and for PostgreSQL. Per run and workload each receiver takes its
turn, the order alternating from run to run (AB, BA, ...), so the two levels of a pair are
measured seconds apart; the targets are judged on the medians of the per-run ratios:

    .venv/bin/python -m bench.ingest --seconds 10 --repeats 5

``--pgbouncer`` adds ``inbox-pgbouncer``: the same receiver through a private pgbouncer in
transaction mode (``dev/pgbouncer.py``, ``INBOX_DB_POOLER=transaction``), measured in the
same runs, and reports its 2xx/s as a ratio to the direct inbox (pgbouncer's CPU apart).

Targets at 32 senders: unique keys >= 1.2x handwritten with p99 <= 50 ms; the storm
>= 1.0x handwritten with p99 <= 100 ms and no 5xx. It also checks that every first answer
(a 202 without Idempotent-Replayed; for the baselines a 202) has its row. JSON goes to
bench/results/ingest.json. The exit status is non-zero only when the benchmark itself
fails, never for a missed target.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.common import baselines, cpu, load, procs
from bench.common.otlp_sink import OtlpSink
from dev import pgbouncer
from web.keepalive import keepalive_requests

SECRET = "benchsecret"
TENANT, SOURCE = "bench", "own"
HOST = "127.0.0.1"
POOLED = "inbox-pgbouncer"  # the inbox behind a private PgBouncer (``--pgbouncer``)
CLEAR = "inbox-clear"  # the inbox with payloads stored in clear (``--clear``)
APPS = {
    "inbox": "web.wsgi:app",
    POOLED: "web.wsgi:app",
    "handwritten": "bench.common.baselines:handwritten",
    "naive": "bench.common.baselines:naive",
    "inbox-otlp": "web.wsgi:app",
    CLEAR: "web.wsgi:app",
}
ROWS_SQL = {
    "inbox": "SELECT count(*) FROM events",
    POOLED: "SELECT count(*) FROM events",
    "handwritten": "SELECT count(*) FROM handwritten_events",
    "naive": "SELECT count(*) FROM naive_events",
    "inbox-otlp": "SELECT count(*) FROM events",
    CLEAR: "SELECT count(*) FROM events",
}
TRACED = "inbox-otlp"
WORKLOADS = ("unique", "storm")
BASELINE = "handwritten"
TARGET_SENDERS = 32
TARGETS = {  # workload: (minimum ratio to the baseline's 2xx/s, maximum p99 ms)
    "unique": (1.2, 50.0),
    "storm": (1.0, 100.0),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=10.0, help="measured window per level")
    p.add_argument("--warmup", type=float, default=2.0, help="unrecorded warm-up per level")
    p.add_argument("--senders", type=int, default=TARGET_SENDERS, help="concurrent senders")
    p.add_argument("--repeats", type=int, default=1, help="runs, receivers alternating")
    p.add_argument("--receivers", default="inbox,handwritten", help="which, comma-separated")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="unique,storm")
    p.add_argument(
        "--otlp", action="store_true", help="also inbox with OTLP tracing on (inbox-otlp)"
    )
    procs.server_arguments(p)
    p.add_argument("--out", type=Path, default=procs.RESULTS / "ingest.json")
    p.add_argument(
        "--pgbouncer",
        action="store_true",
        help=f"also {POOLED}: the inbox through a private pgbouncer in transaction mode"
        " (INBOX_DB_POOLER=transaction), reported as a ratio to the direct inbox",
    )
    p.add_argument(
        "--clear",
        action="store_true",
        help=f"also {CLEAR}: the inbox with payload sealing off (INBOX_ENCRYPT_PAYLOADS=0),"
        " reported as the sealed inbox's ratio to it",
    )
    args = p.parse_args(argv)
    args.receiver_list = [r for r in args.receivers.split(",") if r]
    if args.clear and CLEAR not in args.receiver_list:
        args.receiver_list.append(CLEAR)
    if args.otlp and TRACED not in args.receiver_list:
        args.receiver_list.append(TRACED)
    if args.pgbouncer and POOLED not in args.receiver_list:
        args.receiver_list.append(POOLED)
    if POOLED in args.receiver_list and pgbouncer.available() is not None:
        p.error(str(pgbouncer.available()))
    args.workload_list = [w for w in args.workloads.split(",") if w]
    if set(args.receiver_list) - set(APPS) or set(args.workload_list) - set(WORKLOADS):
        p.error("unknown receiver or workload")
    if not load.wrk_available():
        p.error("wrk is not installed (apt-get install wrk)")
    return args


def start_receiver(
    name: str, args: argparse.Namespace, db_url: str, otlp_url: str | None = None
) -> tuple[procs.Proc, int]:
    """One ``python -m web`` serving ``name``, without a broker, up and answering; tracing
    off, except for ``inbox-otlp`` (OTLP to ``otlp_url``, batch span processor);
    ``inbox-pgbouncer`` through ``args.bouncer``."""
    pooled: dict[str, str | None] = {}
    if name == POOLED:
        pooled = {"INBOX_DB_POOLER": "transaction"}
        db_url = args.bouncer.url(db_url)
    env: dict[str, str | None] = {
        **pooled,
        **dict.fromkeys(("REDIS_URL", "BROKER_URL", "PROMETHEUS_MULTIPROC_DIR")),
        **dict.fromkeys(("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")),
        "DATABASE_URL": db_url,
        "INBOX_DB_POOL_SIZE": str(args.pool_size),
        "BASELINE_SECRET": SECRET,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(procs.ROOT),
        "WEB_KEEPALIVE_REQUESTS": str(keepalive_requests()),
        # Payloads sealed at rest (the default), except for the inbox-clear receiver.
        "INBOX_ENCRYPT_PAYLOADS": "0" if name == CLEAR else "1",
    }
    if name == TRACED:
        env["OTEL_TRACES_EXPORTER"] = "otlp"
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp_url
        env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
    elif name not in ("inbox", CLEAR):
        # a baseline makes its table on first use; the rows are counted first
        baselines.ensure_table(db_url)
    proc, port = procs.web(APPS[name], env, args.workers, args.threads, f"web-{name}")
    procs.wait_http(proc, port, any_answer=True)  # the baselines have no /healthz
    return proc, port


def _sql(db_url: str, sql: str, autocommit: bool = False) -> Any:
    with psycopg.connect(db_url, autocommit=autocommit) as conn:
        cur = conn.execute(sql)
        row = cur.fetchone() if cur.description else None
    return row[0] if row else None


def _statements(db_url: str, reset: bool = False) -> list[dict[str, Any]]:
    """PostgreSQL's own account (pg_stat_statements, on the private cluster) of the time
    spent per statement since the last reset: where the server's CPU goes."""
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            if reset:
                conn.execute("SELECT pg_stat_statements_reset()")
                return []
            rows = conn.execute(
                "SELECT calls, rows, total_exec_time + total_plan_time, query"
                " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
                " WHERE datname = current_database()) ORDER BY 3 DESC LIMIT 6"
            ).fetchall()
    except psycopg.Error:  # not loaded (a server of your own): nothing to show
        return []
    return [
        {"calls": n, "rows": r, "ms": round(ms, 1), "query": " ".join(q.split())[:160]}
        for n, r, ms, q in rows
    ]


def measure(
    name: str,
    workload: str,
    receivers: dict[str, tuple[procs.Proc, int]],
    args: argparse.Namespace,
    db_url: str,
    tag: str,
) -> dict[str, Any]:
    """One level: ``workload`` against receiver ``name`` while the others stand idle (their
    CPU is counted apart, under ``idle``, and is about nothing)."""
    proc, port = receivers[name]
    idle = {f"idle-{n}": p.pid for n, (p, _) in receivers.items() if n != name}
    bouncer = {"pgbouncer": args.bouncer.proc.pid} if args.bouncer is not None else {}
    sampler = cpu.Sampler(
        {"receiver": proc.pid, **idle, **bouncer, "load": os.getpid()},
        cpu.postmaster_of(db_url),
        db_url.rsplit("/", 1)[1].split("?")[0],
    )
    url = f"http://{HOST}:{port}/"
    script = procs.RESULTS / f"wrk-{tag}-{name}-{workload}.lua"
    script.write_text(
        load.wrk_script(f"/hooks/{TENANT}/{SOURCE}", SECRET.encode(), workload == "storm")
    )
    # No level pays for the last one's dirty pages, or plans on stale statistics: a fresh
    # table not yet analyzed sends the duplicate path's UPDATE through the wrong index (a
    # scan of the source's rows; bench/README.md).
    _sql(db_url, "ANALYZE", autocommit=True)
    _sql(db_url, "CHECKPOINT", autocommit=True)
    rows_before = int(_sql(db_url, ROWS_SQL[name]))
    _statements(db_url, reset=True)
    warm = load.run_wrk(url, script, args.senders, args.warmup, f"{tag}-{workload}-w")
    before = sampler.sample()
    run = load.run_wrk(url, script, args.senders, args.seconds, f"{tag}-{workload}-m")
    after = sampler.sample()
    script.unlink()
    top = _statements(db_url)
    rows = int(_sql(db_url, ROWS_SQL[name])) - rows_before
    lv = _level(name, workload, args.senders, warm, run, before, after, rows)
    lv["statements"] = top
    print(
        f"  {name:11} {workload:6}: {lv['ok_per_s']:7.0f} 2xx/s  p50 {lv['p50_ms']:6.1f}"
        f"  p99 {lv['p99_ms']:6.1f} ms  {lv['statuses']}  cpu ms/2xx: receiver"
        f" {c_fmt(lv['cpu_ms']['receiver'])} postgres {c_fmt(lv['cpu_ms'].get('postgres'))}",
        flush=True,
    )
    return lv


def drive(
    args: argparse.Namespace, db_url: str, tag: str, probes: list[str]
) -> list[dict[str, Any]]:
    """Every receiver up at once, then per run and workload each receiver in turn (the
    order alternating from run to run), so the two levels of a pair are measured a few
    seconds apart: this machine's speed drifts over minutes (the speed probes), and a
    ratio of levels measured far apart would carry that drift."""
    receivers: dict[str, tuple[procs.Proc, int]] = {}
    levels: list[dict[str, Any]] = []
    otlp = OtlpSink() if TRACED in args.receiver_list else None
    # In front of the benchmark's server; its CPU is counted apart ("pgbouncer").
    args.bouncer = pgbouncer.PgBouncer(db_url) if POOLED in args.receiver_list else None
    try:
        for name in args.receiver_list:
            receivers[name] = start_receiver(name, args, db_url, otlp.url if otlp else None)
        for run in range(1, args.repeats + 1):
            order = args.receiver_list if run % 2 else args.receiver_list[::-1]
            for workload in args.workload_list:
                for name in order:
                    probes.append(cpu.shown(cpu.probe_cpus()))
                    print(f"run {run} {workload} {name} (speed probe {probes[-1]} us)", flush=True)
                    lv = measure(name, workload, receivers, args, db_url, f"{tag}-{run}")
                    lv["run"] = run
                    levels.append(lv)
    finally:
        for proc, _ in receivers.values():
            proc.stop()
        if otlp is not None:
            print(f"OTLP sink: {otlp.requests} exports, {otlp.bytes:,} bytes", flush=True)
            otlp.close()
        if args.bouncer is not None:
            args.bouncer.stop()
    return levels


def _level(
    name: str,
    workload: str,
    senders: int,
    warm: dict[str, Any],
    run: dict[str, Any],
    before: dict[str, float],
    after: dict[str, float],
    rows: int,
) -> dict[str, Any]:
    seconds = run["duration_us"] / 1e6
    statuses = run["statuses"]
    ok = sum(n for s, n in statuses.items() if 200 <= int(s) < 300)
    cores = cpu.window(before, after, seconds)
    # First answers over warm-up and window (the rows counted span both): a 202 without
    # Idempotent-Replayed for the inbox, a 202 for the baselines.
    firsts = sum(r["statuses"].get("202", 0) - r.get("replayed", 0) for r in (warm, run))
    return {
        "receiver": name,
        "workload": workload,
        "senders": senders,
        "seconds": seconds,
        "ok": ok,
        "ok_per_s": ok / seconds,
        "p50_ms": run["p50_ms"],
        "p99_ms": run["p99_ms"],
        "max_ms": run["max_ms"],
        "statuses": statuses,
        "replayed": run.get("replayed", 0),
        "five_xx": sum(n for s, n in statuses.items() if int(s) >= 500),
        "cpu_cores": cores,
        "cpu_ms": {k: v * seconds * 1000 / ok if ok else math.nan for k, v in cores.items()},
        # wrk stops with up to one request per connection in flight, twice per level
        "rows": {"stored": rows, "first_answers": firsts, "in_flight_max": 2 * senders},
        "rows_ok": firsts <= rows <= firsts + 2 * senders,
    }


def c_fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _median(values: list[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def judge(levels: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    """Per workload: inbox/baseline 2xx/s per run, the median, p99 medians, and the verdict."""
    by = {(lv["run"], lv["receiver"], lv["workload"]): lv for lv in levels}
    out: dict[str, Any] = {}
    for workload in sorted({lv["workload"] for lv in levels}):
        ratios, p99s, five_xx, pooled = [], [], 0, []
        for run in range(1, runs + 1):
            mine, theirs = by.get((run, "inbox", workload)), by.get((run, BASELINE, workload))
            through = by.get((run, POOLED, workload))
            if mine is None:
                continue
            if through is not None and mine["ok_per_s"]:
                pooled.append(through["ok_per_s"] / mine["ok_per_s"])
            p99s.append(mine["p99_ms"])
            five_xx += mine["five_xx"]
            if theirs is not None and theirs["ok_per_s"]:
                ratios.append(mine["ok_per_s"] / theirs["ok_per_s"])
        min_ratio, max_p99 = TARGETS[workload]
        ratio, p99 = _median(ratios), _median(p99s)
        out[workload] = {
            "ratios": ratios,
            "ratio": ratio,
            "ratio_min": min_ratio,
            "p99s_ms": p99s,
            "p99_ms": p99,
            "p99_ms_max": max_p99,
            "five_xx": five_xx,
            "met": bool(ratio >= min_ratio and p99 <= max_p99 and five_xx == 0) if ratios else None,
            # the inbox through pgbouncer against the inbox direct, per run (no target)
            "pgbouncer_ratios": pooled,
            "pgbouncer_ratio": _median(pooled),
        }
    return out


def tracing_cost(levels: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    """Per workload: inbox-otlp/inbox 2xx/s per run (tracing on over off) and the median."""
    by = {(lv["run"], lv["receiver"], lv["workload"]): lv for lv in levels}
    out: dict[str, Any] = {}
    for workload in sorted({lv["workload"] for lv in levels if lv["receiver"] == TRACED}):
        ratios = []
        for run in range(1, runs + 1):
            on, off = by.get((run, TRACED, workload)), by.get((run, "inbox", workload))
            if on is not None and off is not None and off["ok_per_s"]:
                ratios.append(on["ok_per_s"] / off["ok_per_s"])
        out[workload] = {"ratios": ratios, "ratio": _median(ratios)}
    return out


def sealing_cost(levels: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    """Per workload: inbox (sealed) over inbox-clear 2xx/s per run, and the median."""
    by = {(lv["run"], lv["receiver"], lv["workload"]): lv for lv in levels}
    out: dict[str, Any] = {}
    for workload in sorted({lv["workload"] for lv in levels if lv["receiver"] == CLEAR}):
        ratios = []
        for run in range(1, runs + 1):
            on, off = by.get((run, "inbox", workload)), by.get((run, CLEAR, workload))
            if on is not None and off is not None and off["ok_per_s"]:
                ratios.append(on["ok_per_s"] / off["ok_per_s"])
        out[workload] = {"ratios": ratios, "ratio": _median(ratios)}
    return out


def print_report(report: dict[str, Any]) -> None:
    print()
    print(f"{report['settings']['server']}; {report['settings']['senders']} senders (wrk)")
    print(
        "| run | receiver | workload | 2xx/s | p50 ms | p99 ms | answers | "
        "CPU ms/2xx receiver | CPU ms/2xx PostgreSQL |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for lv in report["levels"]:
        answers = ", ".join(f"{s}: {n}" for s, n in lv["statuses"].items())
        print(
            f"| {lv['run']} | {lv['receiver']} | {lv['workload']} | {lv['ok_per_s']:,.0f}"
            f" | {lv['p50_ms']:.1f} | {lv['p99_ms']:.1f} | {answers}"
            f" | {c_fmt(lv['cpu_ms']['receiver'])} | {c_fmt(lv['cpu_ms'].get('postgres'))} |"
        )
    print()
    print("PostgreSQL's time by statement (pg_stat_statements), ms per 2xx:")
    for lv in report["levels"]:
        for st in lv.get("statements", [])[:3]:
            per = st["ms"] / lv["ok"] if lv["ok"] else math.nan
            print(
                f"  {lv['run']} {lv['receiver']:11} {lv['workload']:6} {c_fmt(per, 3)}"
                f"  calls {st['calls']}  {st['query'][:90]}"
            )
    print()
    for workload, t in report["targets"].items():
        verdict = {None: "not measured", True: "MET", False: "NOT MET"}[t["met"]]
        print(
            f"{workload}: inbox/{BASELINE} {c_fmt(t['ratio'])}x (runs: "
            + ", ".join(c_fmt(r) for r in t["ratios"])
            + f"; target >= {t['ratio_min']}x), p99 median {c_fmt(t['p99_ms'], 1)} ms"
            f" (target <= {t['p99_ms_max']:.0f}), 5xx {t['five_xx']}: {verdict}"
        )
    for workload, t in report.get("tracing", {}).items():
        print(
            f"{workload}: {TRACED}/inbox (OTLP tracing on over off) {c_fmt(t['ratio'])}x (runs: "
            + ", ".join(c_fmt(r) for r in t["ratios"])
            + ")"
        )
    for workload, t in report.get("sealing", {}).items():
        print(
            f"{workload}: inbox/{CLEAR} (payloads sealed over in clear) {c_fmt(t['ratio'])}x"
            " (runs: " + ", ".join(c_fmt(r) for r in t["ratios"]) + "; target >= 0.9x)"
        )
    for workload, t in report["targets"].items():
        if t["pgbouncer_ratios"]:
            print(
                f"{workload}: {POOLED}/inbox {c_fmt(t['pgbouncer_ratio'])}x 2xx/s (runs: "
                + ", ".join(c_fmt(r) for r in t["pgbouncer_ratios"])
                + ")"
            )
    bad = [f"{lv['run']}/{lv['receiver']}/{lv['workload']}" for lv in report["levels"]]
    bad = [b for b, lv in zip(bad, report["levels"], strict=True) if not lv["rows_ok"]]
    print("rows check: " + ("every first answer has its row" if not bad else f"MISMATCH {bad}"))
    m = report["machine"]
    print(
        f"machine: {m['cpus']} cores; busy before the run {m['background_cores']:.2f} cores;"
        f" load average {m['loadavg']}; speed probe per CPU (us, lower is faster): "
        + "; ".join(m["speed_probes_us"])
    )


def main(argv: list[str] | None = None) -> int:
    procs.use_own_kek()
    args = parse_args(argv)
    procs.RESULTS.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    busy = cpu.machine_cpu()[0]
    time.sleep(1.0)
    background = cpu.machine_cpu()[0] - busy
    probes: list[str] = []
    preload = {"shared_preload_libraries": "pg_stat_statements"}
    with procs.source_database(
        args.pg_url, "inbox_bench", (TENANT, SOURCE, SECRET), preload
    ) as db_url:
        _sql(db_url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements", autocommit=True)
        levels = drive(args, db_url, tag, probes)
        # The inbox's rows sealed (under a key of the key store) and in clear: the sealed
        # receiver's run did seal (inbox-clear's rows are the clear ones).
        sealed = _sql(db_url, "SELECT count(*) FROM events WHERE key_id IS NOT NULL")
        print(f"events sealed: {sealed} of {_sql(db_url, 'SELECT count(*) FROM events')}")
        levels.sort(key=lambda lv: (lv["run"], lv["workload"], lv["receiver"]))
        report = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {
                "cpus": os.cpu_count(),
                "background_cores": background,
                "loadavg": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
                "speed_probes_us": probes,
                "postgresql": _sql(db_url, "SHOW server_version"),
            },
            "settings": {
                "server": f"python -m web --workers {args.workers} --threads {args.threads},"
                f" pool {args.pool_size} per worker",
                "senders": args.senders,
                "seconds": args.seconds,
                "warmup": args.warmup,
                "repeats": args.repeats,
            },
            "levels": levels,
            "targets": judge(levels, args.repeats),
        }
        if TRACED in args.receiver_list:
            report["tracing"] = tracing_cost(levels, args.repeats)
        if CLEAR in args.receiver_list:
            report["sealing"] = sealing_cost(levels, args.repeats)
        print_report(report)
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
