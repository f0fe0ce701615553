"""What the self-audit costs the database at the pipeline's rate.

    .venv/bin/python -m bench.pipeline.audit_cost [--rate 150] [--minutes 5]

The pipeline's stack (``bench.pipeline.stack``: web, worker, courier, a private PostgreSQL
and Redis, the sink) under its signed load at ``--rate`` for ``--minutes``; beat is
stopped once the stack is up, so the only audit is this script's: every 60 s it runs the
incremental pass beat would run (``inbox.services.audit.run``, every invariant), on one
connection of its own, and after the load a full pass over everything the run wrote.
The cost is that connection's PostgreSQL backend's CPU time (from /proc), set against
the whole cluster's CPU time over the same window: the audit's share of the database's
time. Wall time of the passes is reported too.

Writes bench/results/audit-cost.json and prints a table.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback
from typing import Any

from sqlalchemy import text

from bench.common import cpu, procs
from bench.pipeline.measure import Sender, outcome
from bench.pipeline.stack import Stack, cpu_seconds
from inbox.domain.invariants import INCREMENTAL_SECONDS
from inbox.infra.config import Settings
from inbox.services import audit
from inbox.services.runtime import Runtime
from inbox.store.db.engine import make_engine


def _pass(engine: Any, backend: int, settings: Settings, full: bool) -> dict[str, Any]:
    cpu0, t0 = cpu.process_seconds(backend), time.monotonic()
    report = audit.run(Runtime(settings, engine), full=full)
    return {
        "full": full,
        "wall_s": round(time.monotonic() - t0, 4),
        "backend_cpu_s": round(cpu.process_seconds(backend) - cpu0, 4),
        "violations": report.violations,
        "by_invariant_ms": {c.invariant.value: round(c.seconds * 1000, 1) for c in report.checked},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    stack = Stack(1)
    try:
        stack.start()
        assert stack.beat is not None
        stack.beat.stop()  # the audit under measure is this script's own
        stack.beat = None
        settings = Settings(database_url=stack.url)
        engine = make_engine(settings, pool_size=1)
        with engine.connect() as conn:
            backend = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        _pass(engine, backend, settings, full=True)  # the watermarks start here
        Sender(stack).run("warm", 50, 5)
        sender, stop = Sender(stack), threading.Event()
        seconds = args.minutes * 60
        load = threading.Thread(target=sender.run, args=("audit", args.rate, seconds, stop))
        before, t0 = cpu_seconds(stack), time.monotonic()
        load.start()
        passes = []
        while load.is_alive():
            load.join(INCREMENTAL_SECONDS)
            passes.append(_pass(engine, backend, settings, full=False))
            print(f"  incremental pass: {passes[-1]}", flush=True)
        after, elapsed = cpu_seconds(stack), time.monotonic() - t0
        result = outcome(stack, "audit", sender)
        full = _pass(engine, backend, settings, full=True)
        print(f"  full pass: {full}", flush=True)
        engine.dispose()
        pg_cpu = after["postgres"] - before["postgres"]
        audit_cpu = sum(p["backend_cpu_s"] for p in passes)
        audit_wall = sum(p["wall_s"] for p in passes)
        return {
            "rate": args.rate,
            "seconds": round(elapsed, 1),
            "events": result["events"],
            "completed": result["completed"],
            "deliveries": result["deliveries"],
            "lost": result["lost"],
            "passes": passes,
            "full_pass": full,
            "postgres_cpu_s": round(pg_cpu, 3),
            "audit_backend_cpu_s": round(audit_cpu, 3),
            "audit_wall_s": round(audit_wall, 3),
            "share_of_postgres_cpu": round(audit_cpu / pg_cpu, 5) if pg_cpu else None,
            "wall_share_of_one_core": round(audit_wall / elapsed, 5),
            "machine_cpu_s": round(after["machine"] - before["machine"], 1),
        }
    finally:
        stack.stop()


def table(r: dict[str, Any]) -> str:
    full = r["full_pass"]
    return "\n".join(
        [
            "| rate | events | incremental passes | audit backend CPU s | PostgreSQL CPU s"
            " | share | audit wall s | full pass wall / CPU s |",
            "|---|---|---|---|---|---|---|---|",
            f"| {r['rate']:g}/s | {r['events']:,} | {len(r['passes'])} |"
            f" {r['audit_backend_cpu_s']:.2f} | {r['postgres_cpu_s']:.1f} |"
            f" {100 * (r['share_of_postgres_cpu'] or 0):.2f} % | {r['audit_wall_s']:.2f} |"
            f" {full['wall_s']:.2f} / {full['backend_cpu_s']:.2f} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rate", type=float, default=150.0, help="offered events/s")
    p.add_argument("--minutes", type=float, default=5.0)
    args = p.parse_args(argv)
    procs.RESULTS.mkdir(exist_ok=True)
    load0 = os.getloadavg()
    try:
        r = run(args)
    except Exception:
        traceback.print_exc()
        return 1
    procs.write_report(procs.RESULTS / "audit-cost.json", {"load_before": load0, **r})
    print(table(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
