"""What idling costs, and how fast the first event after it goes through.

The pipeline of ``bench.pipeline`` (every process as the Procfile starts it, one web
process, the 2-step playbook with one callback per event, a private PostgreSQL cluster and
Redis). After a warm-up (50 events/s for 5 s) and ``--settle`` seconds with no events:

- **Idle CPU**: each process kind's CPU from /proc (its whole tree) over ``--idle-seconds``
  with no events, in ms of CPU per second (10 ms/s is 1 % of a core). The bar (issue #45,
  item 2): web, worker, courier and beat each under 1 % of a core.
- **The first event after idling**: ``--events`` single events, each sent after a pause of
  ``--gaps`` seconds in turn (nothing else in flight), read back from the database:
  receipt→completed (``events.finished_at - received_at``) and receipt→callback (the
  delivery's ``finished_at``), both on the database's clock, and the sender's own
  answer time. The bar: p99 receipt→completed ≤ 100 ms, from the doorbell, not a poll.

    .venv/bin/python -m bench.pipeline.idle [--idle-seconds 60] [--events 60] [--gaps 1,3,10]

Prints both, writes bench/results/pipeline-idle.json.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from typing import Any

import psycopg

from bench.common import procs
from bench.pipeline.measure import Sender, window
from bench.pipeline.stack import Stack, cpu_seconds, run_on

KINDS = ("web", "worker", "courier", "beat", "redis", "postgres")
BAR_MS_PER_S = 10.0  # 1 % of a core
BAR_FIRST_P99_MS = 100.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--settle", type=float, default=20.0, help="seconds idle before measuring")
    p.add_argument("--idle-seconds", type=float, default=60.0, help="the idle CPU window")
    p.add_argument("--events", type=int, default=60, help="first events after a pause")
    p.add_argument("--gaps", default="1,3,10", help="pauses before each, in turn (seconds)")
    args = p.parse_args(argv)
    args.gaps = [float(x) for x in args.gaps.split(",")]
    return args


def idle_cpu(stack: Stack, seconds: float) -> dict[str, float]:
    """ms of CPU per second by process kind over ``seconds`` with no events."""
    before, t0 = cpu_seconds(stack), time.monotonic()
    time.sleep(seconds)
    after, elapsed = cpu_seconds(stack), time.monotonic() - t0
    return {k: round((after[k] - before[k]) * 1000 / elapsed, 2) for k in KINDS}


LATENCY = """
    SELECT e.state, extract(epoch FROM e.finished_at - e.received_at) * 1000,
           (SELECT extract(epoch FROM d.finished_at - e.received_at) * 1000
              FROM deliveries d WHERE d.event_id = e.id AND d.state = 'delivered')
    FROM events e WHERE e.received_at BETWEEN %(t0)s AND %(t1)s
"""


def first_event(
    stack: Stack, conn: psycopg.Connection[Any], name: str, deadline_s: float = 30
) -> dict[str, float | None]:
    """One event after a pause: its answer time and, once done, its latencies."""
    sender = Sender(stack)
    t0 = time.perf_counter()
    sender.send(name, 0)
    answered_ms = (time.perf_counter() - t0) * 1000
    if not sender.accepted:
        raise RuntimeError(f"the event was refused: {dict(sender.statuses)}")
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        row = conn.execute(LATENCY, window(name)).fetchone()
        if row is not None and row[0] == "completed" and row[2] is not None:
            return {"answer_ms": answered_ms, "completed_ms": row[1], "callback_ms": row[2]}
        time.sleep(0.01)
    raise RuntimeError(f"{name} was not done in {deadline_s:.0f} s")


def quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {
        "p50": round(statistics.median(ordered), 1),
        "p99": round(at(0.99), 1),
        "max": round(ordered[-1], 1),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    procs.RESULTS.mkdir(exist_ok=True)
    load0 = os.getloadavg()
    stack = Stack(1)

    def measure() -> None:
        Sender(stack).run("idle-warm", 50, 5)
        time.sleep(args.settle)
        load_idle = os.getloadavg()
        cpu = idle_cpu(stack, args.idle_seconds)
        print(f"idle CPU, ms per second (load {load_idle[0]:.1f}):", flush=True)
        for kind, v in cpu.items():
            print(f"  {kind:9} {v:7.2f}  ({v / 10:.2f} % of a core)", flush=True)
        samples = []
        with psycopg.connect(stack.url, autocommit=True) as conn:
            gaps = itertools.cycle(args.gaps)
            for i in range(args.events):
                gap = next(gaps)
                time.sleep(gap)
                got = first_event(stack, conn, f"idle-{i}-{time.monotonic_ns()}")
                samples.append({"gap_s": gap, **got})
        load_end = os.getloadavg()
        first = {
            k: quantiles([float(s[k]) for s in samples])
            for k in ("answer_ms", "completed_ms", "callback_ms")
        }
        by_gap = {
            f"{g:g}s": quantiles([float(s["completed_ms"]) for s in samples if s["gap_s"] == g])
            for g in args.gaps
        }
        print(f"first event after a pause ({args.events} events, load {load_end[0]:.1f}):")
        for k, q in first.items():
            print(f"  {k:13} p50 {q['p50']:7.1f}  p99 {q['p99']:7.1f}  max {q['max']:7.1f}")
        for g, q in by_gap.items():
            print(f"  completed after {g:>4} idle: p50 {q['p50']:.1f} p99 {q['p99']:.1f}")
        met = {
            "idle": all(cpu[k] < BAR_MS_PER_S for k in ("web", "worker", "courier", "beat")),
            "first_p99": first["completed_ms"]["p99"] <= BAR_FIRST_P99_MS,
        }
        print(f"bars met: {met}")
        procs.write_report(
            procs.RESULTS / "pipeline-idle.json",
            {
                "load_before": load0,
                "load_idle": load_idle,
                "load_end": load_end,
                "idle_cpu_ms_per_s": cpu,
                "first_event": first,
                "first_completed_by_gap": by_gap,
                "samples": samples,
                "met": met,
            },
        )

    return run_on(stack, measure)


if __name__ == "__main__":
    sys.exit(main())
