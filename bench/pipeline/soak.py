"""The soak: the pipeline at half its rate for many minutes, with a fault every few."""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import statistics
import threading
import time
from typing import Any

import psycopg

from bench.common import procs
from bench.pipeline.measure import LEVEL, Sender, outcome, quantiles, sink_posts
from bench.pipeline.stack import Stack, pss_mb
from bench.pipeline.sweep import fmt


def _restart_postgres(stack: Stack) -> None:
    stack.cluster.restart()


def _kill_worker(stack: Stack) -> None:
    assert stack.worker is not None and stack.ctl is not None
    stack.worker.stop(signal.SIGKILL)
    stack.start_worker()
    procs.wait_celery(stack.ctl, stack.worker)


def _restart_redis(stack: Stack) -> None:
    assert stack.redis is not None
    stack.redis.restart()


FAULTS = (
    ("worker killed", _kill_worker),
    ("Redis restarted", _restart_redis),
    ("PostgreSQL restarted", _restart_postgres),
)


def _observe(stack: Stack) -> dict[str, Any]:
    row: dict[str, Any] = {"t": time.time(), "pss_mb": pss_mb(stack)}
    try:
        with psycopg.connect(stack.url, autocommit=True, connect_timeout=5) as conn:
            got = conn.execute(
                "SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()),"
                " (SELECT count(*) FROM events WHERE state NOT IN"
                "   ('completed', 'quarantined', 'filtered')),"
                " (SELECT count(*) FROM deliveries WHERE state NOT IN ('delivered', 'failed'))"
            ).fetchone()
        assert got is not None
        row |= {"connections": got[0], "unfinished_events": got[1], "unfinished_deliveries": got[2]}
    except psycopg.Error as exc:
        row["error"] = type(exc).__name__
    return row


def _slope(xs: list[float], ys: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    return statistics.linear_regression(xs, ys).slope


def soak(args: argparse.Namespace) -> dict[str, Any]:
    rate = args.rate
    if rate is None:
        last = json.loads((procs.RESULTS / "pipeline.json").read_text())
        rate = 0.5 * last["runs"][0]["sustained_per_s"]
    stack = Stack(1)
    samples: list[dict[str, Any]] = []
    faults: list[dict[str, Any]] = []
    try:
        stack.start()
        sender = Sender(stack, retry=True)
        stop = threading.Event()
        minutes = args.soak_minutes
        load = threading.Thread(
            target=sender.run, args=("soak", rate, minutes * 60, stop), daemon=True
        )
        t0 = time.monotonic()
        load.start()
        fault_at = args.fault_every * 60
        cycle = itertools.cycle(FAULTS)
        while load.is_alive():
            samples.append(_observe(stack) | {"minute": round((time.monotonic() - t0) / 60, 2)})
            if time.monotonic() - t0 >= fault_at and time.monotonic() - t0 < minutes * 60 - 60:
                name, fault = next(cycle)
                print(f"  {(time.monotonic() - t0) / 60:5.1f} min: {name}", flush=True)
                t = time.monotonic()
                fault(stack)
                faults.append(
                    {
                        "minute": round((t - t0) / 60, 2),
                        "fault": name,
                        "seconds": round(time.monotonic() - t, 1),
                    }
                )
                fault_at += args.fault_every * 60
            load.join(timeout=30)
        result = outcome(stack, "soak", sender, deadline_s=300)
        with psycopg.connect(stack.url, autocommit=True) as conn:
            windows = [
                quantiles(
                    conn,
                    "SELECT extract(epoch FROM e.finished_at - e.received_at) * 1000 AS ms"
                    f" FROM events e WHERE {LEVEL} AND e.state = 'completed'"
                    f" AND e.received_at {cond}",
                    "soak",
                )
                for cond in (
                    "< (SELECT min(received_at) FROM events) + interval '5 minutes'",
                    "> (SELECT max(received_at) FROM events) - interval '5 minutes'",
                )
            ]
        first, last5 = windows[0]["p99"], windows[1]["p99"]
        ok = [s for s in samples if "error" not in s]
        xs = [s["minute"] for s in ok]
        memory = {
            kind: {
                "start": ok[0]["pss_mb"][kind] if ok else None,
                "end": ok[-1]["pss_mb"][kind] if ok else None,
                "slope_mb_per_min": round(_slope(xs, [s["pss_mb"][kind] for s in ok]), 3),
            }
            for kind in (ok[0]["pss_mb"] if ok else {})
        }
        return {
            "rate": rate,
            "minutes": minutes,
            "faults": faults,
            "statuses": {str(k): v for k, v in sorted(sender.statuses.items())},
            "refused_then_retried": sender.refused,
            "sink_posts": sink_posts(stack),
            "memory": memory,
            "connections_max": max((s["connections"] for s in ok), default=None),
            "unfinished_slope_per_min": round(
                _slope(xs, [s["unfinished_events"] + s["unfinished_deliveries"] for s in ok]), 3
            ),
            "p99_first5_ms": first,
            "p99_last5_ms": last5,
            "p99_ratio": round(last5 / first, 2) if first and last5 else None,
            "samples": samples,
            **result,
        }
    finally:
        stack.stop()


def soak_table(s: dict[str, Any]) -> str:
    lines = ["| process | PSS start MiB | PSS end MiB | slope MiB/min |", "|---|---|---|---|"]
    for kind, m in s["memory"].items():
        lines.append(f"| {kind} | {m['start']} | {m['end']} | {m['slope_mb_per_min']} |")
    lines.append("")
    lines.append(
        f"rate {s['rate']:g}/s for {s['minutes']} min; faults: "
        + ", ".join(f"{f['fault']} at {f['minute']} min" for f in s["faults"])
    )
    lines.append(
        f"answers {s['statuses']} (refused then retried: {s['refused_then_retried']});"
        f" PostgreSQL connections at most {s['connections_max']}; unfinished work"
        f" {s['unfinished_slope_per_min']}/min; p99 receipt→completed first 5 min"
        f" {fmt(s['p99_first5_ms'])} ms, last 5 min {fmt(s['p99_last5_ms'])} ms"
        f" ({s['p99_ratio']}x); lost {s['lost']}, doubled {s['doubled_events']},"
        f" effects {s['effects']} for {s['events']} events, callbacks at the sink"
        f" {s['sink_posts']} for {s['deliveries']} deliveries"
    )
    return "\n".join(lines)
