"""The whole against the sum of its parts, in one run on one stack (issue 45, item 3).

The pipeline of ``bench.pipeline`` (the Procfile's processes, a private cluster and
Redis, the sink, one web process), measured four times over the same machine state:

1. **ingest alone**: the worker and the courier stopped; ``--events`` events sent through
   the web at ``--rate``; the web's, PostgreSQL's and Redis's CPU per event;
2. **drain alone**: the worker started on that backlog, the courier still stopped; until
   every event is completed; the worker's, PostgreSQL's and Redis's CPU per event;
3. **delivery alone**: the courier started on the callbacks the drain wrote; until every
   one is delivered; the courier's, PostgreSQL's and Redis's CPU per callback;
4. **the whole**: every process running; as many events again at ``--rate``; until each
   is completed and its callback delivered; CPU per event of web, worker, courier, beat,
   PostgreSQL and Redis.

The parts run as each runs best alone (ingest at the whole's rate, the drain and the
delivery over a full backlog, so their batches are full): the sum is the floor the whole
is held to. The sink and the sender are the user's side and counted in neither. Also per
phase: COMMITs and statements per event from PostgreSQL's own counters
(``pg_stat_database``, ``pg_stat_statements``), to set beside ``bench.limits``' ceiling.

    .venv/bin/python -m bench.pipeline.parts [--events 6000] [--rate 270]

Prints a table, writes bench/results/pipeline-parts.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import psycopg

from bench.common import procs
from bench.pipeline.measure import LEVEL, Sender, outcome, window
from bench.pipeline.profile import PSS
from bench.pipeline.stack import Stack, cpu_seconds

OWN = ("web", "worker", "courier", "beat", "postgres", "redis")  # the inbox's side
# Statements from pg_stat_statements; transactions committed from pg_stat_database (an
# autocommit statement is a transaction of its own, with no COMMIT statement to count).
STATEMENTS = """
    SELECT (SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
             WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())),
           (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=6000, help="events per phase")
    p.add_argument("--rate", type=float, default=270.0, help="offered events/s while sending")
    return p.parse_args(argv)


def counts(url: str) -> tuple[int, int]:
    """Statements and committed transactions so far in the run's database."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute(STATEMENTS).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def done(url: str, sql: str, params: dict[str, Any]) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


def wait_until(url: str, sql: str, params: dict[str, Any], want: int, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if done(url, sql, params) >= want:
            return
        time.sleep(0.2)
    raise RuntimeError(f"not done in {deadline_s:.0f} s: {sql.split('FROM')[0].strip()}")


class Phase:
    """CPU by process kind, statements and COMMITs between ``start`` and ``stop``."""

    def __init__(self, stack: Stack, name: str) -> None:
        self.stack, self.name = stack, name

    def __enter__(self) -> Phase:
        self.cpu0, self.t0 = cpu_seconds(self.stack), time.monotonic()
        self.stmts0 = counts(self.stack.url)
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu1, self.seconds = cpu_seconds(self.stack), time.monotonic() - self.t0
        self.stmts1 = counts(self.stack.url)

    def cpu(self, kind: str) -> float:
        return self.cpu1[kind] - self.cpu0[kind]

    def report(
        self, units: int, kinds: tuple[str, ...], less: Phase | None = None
    ) -> dict[str, Any]:
        """Per unit; ``less``: a phase whose CPU is taken off (a process's start)."""
        ms = {
            k: round((self.cpu(k) - (less.cpu(k) if less else 0.0)) * 1000 / units, 3)
            for k in kinds
        }
        calls = self.stmts1[0] - self.stmts0[0]
        commits = self.stmts1[1] - self.stmts0[1]
        return {
            "phase": self.name,
            "units": units,
            "seconds": round(self.seconds, 1),
            "cpu_ms": ms,
            "cpu_ms_total": round(sum(ms.values()), 3),
            "statements_per_unit": round(calls / units, 2),
            "commits_per_unit": round(commits / units, 2),
        }


DONE = f"SELECT count(*) FROM events e WHERE {LEVEL} AND e.state = 'completed'"
DELIVERED = (
    f"SELECT count(*) FROM deliveries d JOIN events e ON d.event_id = e.id"
    f" WHERE {LEVEL} AND d.state = 'delivered'"
)


def _procs(stack: Stack, kind: str) -> list[procs.Proc]:
    if kind == "worker":
        return [stack.worker] if stack.worker is not None else []
    return stack.couriers


def start(stack: Stack, kind: str) -> None:
    """Start the worker or the courier and wait until it is ready."""
    (stack.start_worker if kind == "worker" else stack.start_courier)()
    assert stack.ctl is not None
    for proc in _procs(stack, kind):
        procs.wait_celery(stack.ctl, proc)


def stop(stack: Stack, kind: str) -> None:
    for proc in _procs(stack, kind):
        proc.stop()
    if kind == "worker":
        stack.worker = None
    else:
        stack.couriers = []


def run(args: argparse.Namespace) -> dict[str, Any]:
    stack = Stack(1, cluster_settings=PSS)
    try:
        stack.start()
        with psycopg.connect(stack.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        warm = Sender(stack)
        warm.run("parts-warm", 50, 5)
        outcome(stack, "parts-warm", warm)
        stop(stack, "worker")
        stop(stack, "courier")
        # A process's start (Celery's boot: about a second of CPU) is not the part's work.
        # Each is measured on its own first, with nothing to do, and taken off its phase.
        with Phase(stack, "worker start") as worker_boot:
            start(stack, "worker")
        stop(stack, "worker")
        with Phase(stack, "courier start") as courier_boot:
            start(stack, "courier")
        stop(stack, "courier")
        seconds = args.events / args.rate
        sender = Sender(stack)
        with Phase(stack, "ingest alone") as ingest:
            sender.run("parts-alone", args.rate, seconds)
        n = len(sender.accepted)
        alone = window("parts-alone")
        with Phase(stack, "drain alone") as drain:
            start(stack, "worker")
            wait_until(stack.url, DONE, alone, n, 600)
        with Phase(stack, "delivery alone") as deliver:
            start(stack, "courier")
            wait_until(stack.url, DELIVERED, alone, n, 600)

        whole_sender = Sender(stack)
        with Phase(stack, "whole") as whole:
            whole_sender.run("parts-whole", args.rate, seconds)
            result = outcome(stack, "parts-whole", whole_sender, deadline_s=600)
        m = result["completed"]
        phases = [
            ingest.report(n, ("web", "postgres", "redis")),
            drain.report(n, ("worker", "postgres", "redis"), less=worker_boot),
            deliver.report(n, ("courier", "postgres", "redis"), less=courier_boot),
            whole.report(max(m, 1), OWN),
        ]
        parts = round(sum(p["cpu_ms_total"] for p in phases[:3]), 3)
        return {
            "events": args.events,
            "rate": args.rate,
            "phases": phases,
            "sum_of_parts_ms": parts,
            "whole_ms": phases[3]["cpu_ms_total"],
            "ratio": round(phases[3]["cpu_ms_total"] / parts, 2),
            "whole_outcome": result,
        }
    finally:
        stack.stop()


def table(r: dict[str, Any]) -> str:
    lines = [
        "| phase | events | seconds | CPU ms per event, by process | total | statements"
        " / COMMITs per event |",
        "|---|---|---|---|---|---|",
    ]
    for p in r["phases"]:
        split = ", ".join(f"{k} {v:.2f}" for k, v in p["cpu_ms"].items())
        lines.append(
            f"| {p['phase']} | {p['units']} | {p['seconds']} | {split} | {p['cpu_ms_total']:.2f}"
            f" | {p['statements_per_unit']} / {p['commits_per_unit']} |"
        )
    lines.append(
        f"\nWhole {r['whole_ms']:.2f} ms/event against the sum of the parts"
        f" {r['sum_of_parts_ms']:.2f}: **{r['ratio']}x** (the bar: 1.5x)."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    procs.RESULTS.mkdir(exist_ok=True)
    load0 = os.getloadavg()
    r = run(args)
    r["load_before"], r["load_after"] = load0, os.getloadavg()
    procs.write_report(procs.RESULTS / "pipeline-parts.json", r)
    print(table(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
