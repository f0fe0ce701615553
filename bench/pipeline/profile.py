"""Where the pipeline's time goes: CPU by function and statements by process, per level.

The pipeline of ``bench.pipeline`` (every process as the Procfile starts it, one web
process, the 2-step playbook with one callback per event), each process kind connecting as
a database role of its own (``bench_web``, ``bench_worker``, ``bench_courier``,
``bench_beat``; the playbook's effect row as ``bench_playbook``), on a private cluster with
``pg_stat_statements`` loaded. For each offered rate in turn (default 150 and 270/s: 50 %
and 90 % of the 300/s the sweep held with one web process):

- CPU by process kind from /proc over the level (sending, then until every event and
  callback is done), in ms per completed event;
- statements (round trips: every call ``pg_stat_statements`` counts, BEGIN and COMMIT
  included) and COMMITs per event for each role, and the database's transactions
  (``pg_stat_database.xact_commit``) and writing commits (transaction ids) per event;
- ``py-spy record`` (raw, 100 samples/s, non-blocking, idle threads left out) of web,
  worker and courier, their children included, over the sending window: each kind's
  samples by the package of the innermost frame (self time), and the functions with the
  most samples in their stack (inclusive). py-spy's own CPU is reported: it shares the
  machine's two cores with what it samples (``--no-spy`` leaves it out).

    .venv/bin/python -m bench.pipeline.profile [--rates 150,270] [--seconds 30] [--no-spy]

Prints a table per level, writes bench/results/pipeline-profile.json (with the raw
py-spy files' paths in .data/).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from bench.common import procs
from bench.pipeline.measure import Sender, outcome
from bench.pipeline.stack import KINDS, Stack, cpu_seconds, run_on

SPIED = ("web", "worker", "courier")
PSS = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.max": "10000"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rates", default="150,270", help="offered events/s, a level each")
    p.add_argument("--seconds", type=float, default=30.0, help="each level's sending window")
    p.add_argument("--rate-hz", type=int, default=100, help="py-spy samples per second")
    p.add_argument("--no-spy", action="store_true", help="no py-spy: CPU and statements only")
    p.add_argument("--top", type=int, default=12, help="functions listed per process kind")
    args = p.parse_args(argv)
    args.rates = [float(x) for x in args.rates.split(",")]
    return args


# -- statements by role ---------------------------------------------------------------------

BY_ROLE = """
    SELECT r.rolname, sum(s.calls)::bigint,
           coalesce(sum(s.calls) FILTER (WHERE upper(s.query) IN ('COMMIT', 'END')), 0)::bigint,
           coalesce(sum(s.calls) FILTER (WHERE upper(s.query) LIKE 'BEGIN%%'), 0)::bigint,
           coalesce(sum(s.calls) FILTER (WHERE s.query LIKE '%%SKIP LOCKED%%'), 0)::bigint
    FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
    WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    GROUP BY r.rolname
"""
TOP_STATEMENTS = """
    SELECT r.rolname, s.calls, s.query
    FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
    WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND r.rolname LIKE 'bench\\_%%'
    ORDER BY s.calls DESC LIMIT 40
"""
DB_COUNTS = """
    SELECT xact_commit, pg_current_xact_id()::text::bigint
    FROM pg_stat_database WHERE datname = current_database()
"""


def db_counts(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(DB_COUNTS).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def statements(conn: psycopg.Connection[Any], events: int) -> dict[str, Any]:
    """Per role: statements, COMMITs and BEGINs per event; the busiest statements."""
    per_role = {}
    for role, calls, commits, begins, claims in conn.execute(BY_ROLE).fetchall():
        name = role.removeprefix("bench_")
        per_role[name] = {
            "statements_per_event": round(calls / events, 3),
            "commits_per_event": round(commits / events, 3),
            "begins_per_event": round(begins / events, 3),
            "claims": int(claims),  # the claiming statements (FOR UPDATE SKIP LOCKED): batches
        }
    top = [
        {"role": r.removeprefix("bench_"), "per_event": round(c / events, 3), "query": q[:160]}
        for r, c, q in conn.execute(TOP_STATEMENTS).fetchall()
    ]
    return {"by_role": per_role, "top": top}


# -- py-spy ---------------------------------------------------------------------------------


def spy(pid: int, out: Path, seconds: float, rate_hz: int) -> subprocess.Popen[bytes]:
    exe = shutil.which("py-spy", path=str(procs.BIN)) or shutil.which("py-spy")
    if exe is None:
        raise RuntimeError("py-spy is not installed: .venv/bin/pip install py-spy")
    args = [exe, "record", "-p", str(pid), "--format", "raw", "--output", str(out)]
    args += ["--duration", str(int(seconds)), "--rate", str(rate_hz), "--subprocesses"]
    args += ["--nonblocking", "--full-filenames", "--gil"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")
SITE = re.compile(r"/(?:site|dist)-packages/([^/]+)")


def package(path: str) -> str:
    """A frame's file as a package: a site-package's top name, the project's folder and
    module (``inbox/services``), or the standard library's module."""
    if m := SITE.search(path):
        return m.group(1).removesuffix(".py")
    root = str(procs.ROOT) + "/"
    if path.startswith(root):
        parts = path[len(root) :].split("/")
        return "/".join(parts[:2]).removesuffix(".py")
    if "/lib/python3" in path:
        rest = path.split("/lib/python3", 1)[1].split("/", 2)
        return f"stdlib {rest[1].removesuffix('.py')}" if len(rest) > 1 else "stdlib"
    return path or "?"


def frames(line: str) -> tuple[list[tuple[str, str]], int]:
    stack, _, count = line.rstrip().rpartition(" ")
    out = []
    for raw in stack.split(";"):
        if raw.startswith("process ") or raw.startswith("thread "):
            continue
        m = FRAME.match(raw)
        out.append((m.group("func"), m.group("file")) if m else (raw, ""))
    return out, int(count)


def profile_of(path: Path, top: int) -> dict[str, Any]:
    """Samples by package of the innermost frame, and functions by samples in their stack
    (each function once per sample) and as the innermost frame."""
    self_pkg: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = 0
    if not path.exists():
        return {"samples": 0}
    # One stack per line, each opening with its process (``--subprocesses``); a frame's
    # name may hold a newline (a statement's text), so records split where one opens.
    for record in re.split(r"\n(?=process \d+:)", path.read_text(errors="replace")):
        line = record.replace("\n", " ").strip()
        if not line or not line.rpartition(" ")[2].isdigit():
            continue
        stack, n = frames(line)
        if not stack:
            continue
        total += n
        func, file = stack[-1]
        self_pkg[package(file)] += n
        leaf[f"{func} ({package(file)})"] += n
        for name in {f"{f} ({package(p)})" for f, p in stack}:
            inclusive[name] += n

    def share(c: Counter[str]) -> list[tuple[str, float]]:
        return [(k, round(v / total, 3)) for k, v in c.most_common(top)]

    return {
        "samples": total,
        "self_by_package": share(self_pkg),
        "inclusive": share(inclusive),
        "self": share(leaf),
    }


# -- one level ------------------------------------------------------------------------------


def level(
    stack: Stack, conn: psycopg.Connection[Any], rate: float, args: argparse.Namespace
) -> dict[str, Any]:
    name = f"profile-r{rate:g}-{time.monotonic_ns()}"
    conn.execute("SELECT pg_stat_statements_reset()")
    xact0, xid0 = db_counts(conn)
    sender = Sender(stack)
    spies: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    before, t0 = cpu_seconds(stack), time.monotonic()
    if not args.no_spy:
        trees = stack.trees()
        for kind in SPIED:
            raw = procs.LOGS / f"bench-profile-{kind}-r{rate:g}-{os.getpid()}.txt"
            spies[kind] = (spy(trees[kind][0], raw, args.seconds, args.rate_hz), raw)
    reaped0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    offered = sender.run(name, rate, args.seconds)
    for proc, _ in spies.values():
        try:
            proc.wait(args.seconds + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    reaped1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    spy_cpu = (reaped1.ru_utime + reaped1.ru_stime) - (reaped0.ru_utime + reaped0.ru_stime)
    result = outcome(stack, name, sender)
    after, elapsed = cpu_seconds(stack), time.monotonic() - t0
    xact1, xid1 = db_counts(conn)
    events = max(result["completed"], 1)
    cpu_ms = {k: round((after[k] - before[k]) * 1000 / events, 3) for k in after if k in before}
    cpu_per_s = {k: round((after[k] - before[k]) * 1000 / elapsed, 1) for k in after if k in before}
    got = statements(conn, events)
    per_claim = {}
    for kind in ("worker", "courier"):
        claims = got["by_role"].get(kind, {}).get("claims", 0)
        if claims:
            per_claim[kind] = {
                "events_per_claim": round(events / claims, 2),
                "cpu_ms_per_claim": round((after[kind] - before[kind]) * 1000 / claims, 2),
            }
    # the two reads of the counters are this process's own: one transaction each
    got["transactions_per_event"] = round((xact1 - xact0 - 2) / events, 3)
    got["writing_commits_per_event"] = round((xid1 - xid0) / events, 3)
    out = {
        "rate": rate,
        "offered_per_s": round(offered, 1),
        "elapsed_s": round(elapsed, 1),
        "events": result["events"],
        "completed": result["completed"],
        "lost": result["lost"],
        "doubled_events": result["doubled_events"],
        "completed_ms": result["completed_ms"],
        "callback_ms": result["callback_ms"],
        "cpu_ms_per_event": cpu_ms,
        "cpu_ms_per_s": cpu_per_s,
        "db": got,
        "batches": per_claim,
        "load": os.getloadavg(),
    }
    profiles: dict[str, dict[str, Any]] = {}
    for kind, (proc, path) in spies.items():
        err = proc.stderr.read().decode(errors="replace")[-500:] if proc.stderr else ""
        profiles[kind] = {"raw": str(path), **profile_of(path, args.top)}
        if not profiles[kind]["samples"]:
            profiles[kind]["error"] = err
        if proc.stderr:
            proc.stderr.close()
    out["profiles"] = profiles
    out["spy_cpu_ms_per_s"] = round(spy_cpu * 1000 / max(args.seconds, 1e-9), 1)
    return out


def show(r: dict[str, Any]) -> str:
    lines = [
        f"rate {r['rate']:g}/s (offered {r['offered_per_s']}/s, load {r['load'][0]:.1f}):"
        f" completed p50/p99 {r['completed_ms']['p50']:.0f}/{r['completed_ms']['p99']:.0f} ms,"
        f" callback p50/p99 {r['callback_ms']['p50']:.0f}/{r['callback_ms']['p99']:.0f} ms,"
        f" lost {r['lost']}, doubled {r['doubled_events']}, py-spy {r['spy_cpu_ms_per_s']} ms/s",
        "  CPU ms/event: "
        + ", ".join(f"{k} {v:.2f}" for k, v in r["cpu_ms_per_event"].items() if k != "machine"),
        "  CPU ms/s:     " + ", ".join(f"{k} {v:.0f}" for k, v in r["cpu_ms_per_s"].items()),
        f"  database: transactions/event {r['db']['transactions_per_event']},"
        f" writing commits/event {r['db']['writing_commits_per_event']}",
    ]
    for kind, v in r["batches"].items():
        lines.append(
            f"  {kind}: {v['events_per_claim']} events per claim,"
            f" {v['cpu_ms_per_claim']} ms of its CPU per claim"
        )
    for role, v in sorted(r["db"]["by_role"].items()):
        lines.append(
            f"    {role:10} statements/event {v['statements_per_event']:.2f}"
            f"  COMMITs/event {v['commits_per_event']:.2f}"
            f"  BEGINs/event {v['begins_per_event']:.2f}"
            f"  claims {v['claims']}"
        )
    lines.append("  busiest statements (per event):")
    for t in r["db"]["top"][:15]:
        q = " ".join(t["query"].split())[:100]
        lines.append(f"    {t['role']:8} {t['per_event']:6.2f}  {q}")
    for kind, p in r["profiles"].items():
        lines.append(f"  {kind}: {p['samples']} samples {p.get('error', '')}")
        if not p["samples"]:
            continue
        lines.append(
            "    self by package: " + ", ".join(f"{k} {v:.0%}" for k, v in p["self_by_package"])
        )
        lines.append("    inclusive: " + "; ".join(f"{k} {v:.0%}" for k, v in p["inclusive"]))
        lines.append("    self: " + "; ".join(f"{k} {v:.0%}" for k, v in p["self"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    procs.RESULTS.mkdir(exist_ok=True)
    load0 = os.getloadavg()
    stack = Stack(1, roles=True, cluster_settings=PSS)
    levels = []

    def measure() -> None:
        with psycopg.connect(stack.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            Sender(stack).run("profile-warm", 50, 5)  # every process has run the path once
            time.sleep(2)
            stack.analyze()  # planned on statistics, as a running system is
            for rate in args.rates:
                r = level(stack, conn, rate, args)
                levels.append(r)
                print(show(r), flush=True)
        procs.write_report(
            procs.RESULTS / "pipeline-profile.json",
            {"load_before": load0, "load_after": os.getloadavg(), "kinds": KINDS, "levels": levels},
        )

    return run_on(stack, measure)


if __name__ == "__main__":
    sys.exit(main())
