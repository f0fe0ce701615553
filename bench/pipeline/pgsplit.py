"""Where PostgreSQL's CPU goes, level after level, on one stack.

The pipeline of ``bench.pipeline`` (every process as the Procfile starts it, one web process,
the 2-step playbook with one callback per event), each process kind connecting as a role of
its own and ``pg_stat_statements`` loaded with its planning tracked, as in
``bench.pipeline.profile``. Here the levels run one after another on the same stack, as the
sweep's do, so that what changes between them (the tables' dead rows, their vacuums) shows;
and on a fresh database, with no ``ANALYZE`` after the warm-up (the sweep and the profile run
one), so that the statements planned before autovacuum's first pass show too.
For each level (``--rates``, each for ``--seconds``, then drained):

- PostgreSQL's CPU per event, split by what spent it: the backends of each process kind (a
  backend's role, read from ``pg_stat_activity``; its CPU from /proc), the cluster's own
  processes by their title, and the children that ended during the level (``ended``:
  autovacuum workers and closed connections, whose CPU /proc reports only as a sum);
- the statements that cost the most: calls, mean execution, mean planning and how often a
  statement was planned (a prepared statement on a generic plan is planned once).

``--eager-autovacuum`` runs the cluster with autovacuum every 5 s and 1-2 % scale factors,
to see what vacuuming more often saves the statements and costs the vacuums.

    .venv/bin/python -m bench.pipeline.pgsplit [--rates 400,200,200,200,200] [--seconds 30]
        [--eager-autovacuum]

Prints each level as it ends; writes bench/results/pipeline-pgsplit.json.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

import psycopg

from bench.common import procs
from bench.pipeline.levels import level
from bench.pipeline.profile import PSS
from bench.pipeline.stack import Stack, run_on

EAGER = {
    "autovacuum_naptime": "5s",
    "autovacuum_vacuum_threshold": "500",
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_insert_scale_factor": "0.01",
    "autovacuum_analyze_scale_factor": "0.02",
}
TOP = """
    SELECT r.rolname, s.calls, s.total_exec_time, s.total_plan_time, s.plans,
           regexp_replace(s.query, '\\s+', ' ', 'g')
    FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
    WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    ORDER BY s.total_exec_time + s.total_plan_time DESC LIMIT %(n)s
"""
TICK = os.sysconf("SC_CLK_TCK")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rates", default="400,200,200,200,200", help="offered events/s, in turn")
    p.add_argument("--seconds", type=float, default=30.0, help="each level's sending window")
    p.add_argument("--eager-autovacuum", action="store_true", help="autovacuum every 5 s, 1-2 %%")
    p.add_argument("--top", type=int, default=6, help="statements listed per level")
    args = p.parse_args(argv)
    args.rates = [float(x) for x in args.rates.split(",")]
    return args


def _stat(pid: int) -> tuple[int, float, float]:
    """ppid, own CPU seconds, ended children's CPU seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / TICK
    return int(fields[1]), own, (int(fields[13]) + int(fields[14])) / TICK


def cpu_by_spender(stack: Stack, conn: psycopg.Connection[Any]) -> dict[str, float]:
    """CPU seconds so far of the cluster's processes, by what they are."""
    postmaster = stack.cluster.pid
    conn.execute("SELECT pg_stat_clear_snapshot()")
    roles = {
        pid: role.removeprefix("bench_")
        for pid, role in conn.execute(
            "SELECT pid, usename FROM pg_stat_activity WHERE usename IS NOT NULL"
        ).fetchall()
    }
    out: dict[str, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid, own, _ = _stat(int(entry))
            if ppid != postmaster:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                title = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # it ended meanwhile: its CPU is in ``ended`` from now on
        if int(entry) in roles:
            what = f"backends: {roles[int(entry)]}"
        else:  # "postgres: checkpointer", "postgres: autovacuum launcher", ...
            what = re.sub(r"^postgres: ", "", title).strip()
        out[what] = out.get(what, 0.0) + own
    _, own, ended = _stat(postmaster)
    out["postmaster"] = own
    out["ended"] = ended
    return out


def one(
    stack: Stack, conn: psycopg.Connection[Any], name: str, rate: float, args: argparse.Namespace
) -> dict[str, Any]:
    conn.execute("SELECT pg_stat_statements_reset()")
    before = cpu_by_spender(stack, conn)
    r = level(stack, name, rate, args.seconds, 600.0)
    after = cpu_by_spender(stack, conn)
    events = max(r["completed"], 1)
    spent = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(before) | set(after)}
    top = [
        {
            "role": role.removeprefix("bench_"),
            "calls": calls,
            "exec_ms": round(exec_ms / max(calls, 1), 3),
            "plan_ms": round(plan_ms / max(plans, 1), 3),
            "plans": plans,
            "query": query[:120],
        }
        for role, calls, exec_ms, plan_ms, plans, query in conn.execute(
            TOP, {"n": args.top}
        ).fetchall()
    ]
    return {
        "rate": rate,
        "events": events,
        "p99_completed_ms": r["completed_ms"]["p99"],
        "postgres_ms_per_event": r["cpu_ms_per_event"]["postgres"],
        "by_spender_ms_per_event": {
            k: round(v * 1000 / events, 3)
            for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
            if abs(v) >= 0.005
        },
        "top": top,
    }


def show(r: dict[str, Any]) -> str:
    spenders = ", ".join(f"{k} {v:.2f}" for k, v in r["by_spender_ms_per_event"].items())
    lines = [
        f"{r['rate']:g}/s: PostgreSQL {r['postgres_ms_per_event']:.2f} ms/event = {spenders}"
        f" (p99 completed {r['p99_completed_ms']:.0f} ms)"
    ]
    for s in r["top"]:
        lines.append(
            f"    {s['role']:>8} {s['calls']:>6} calls, exec {s['exec_ms']:7.3f} ms,"
            f" plan {s['plan_ms']:6.3f} ms x{s['plans']:<5} {s['query'][:70]}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    levels: list[dict[str, Any]] = []
    procs.RESULTS.mkdir(exist_ok=True)
    load0 = os.getloadavg()
    settings = {**PSS, "pg_stat_statements.track_planning": "on"}
    stack = Stack(
        1, roles=True, cluster_settings=settings | (EAGER if args.eager_autovacuum else {})
    )

    def measure() -> None:
        with psycopg.connect(stack.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            level(stack, "pgsplit-warm", 50, 5, 600.0)  # every process has run the path once
            for i, rate in enumerate(args.rates):
                levels.append(one(stack, conn, f"pgsplit-{i}-r{rate:g}", rate, args))
                print(show(levels[-1]), flush=True)
        procs.write_report(
            procs.RESULTS / "pipeline-pgsplit.json",
            {
                "load_before": load0,
                "load_after": os.getloadavg(),
                "eager_autovacuum": args.eager_autovacuum,
                "levels": levels,
            },
        )

    return run_on(stack, measure)


if __name__ == "__main__":
    sys.exit(main())
