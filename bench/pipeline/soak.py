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
from bench.pipeline.measure import LEVEL, Sender, outcome, quantiles, sink_posts, window
from bench.pipeline.stack import Stack, pss_mb
from bench.pipeline.tables import fmt


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


# Each half minute of receipts (by the first receipt of the run): how many, p99 and the
# slowest receipt→completed, and of the events over a second: how many waited for their
# first step (a missed wake-up, a lapsed lease), how many were claimed more than once, and
# the failures the store recorded for them, by class. It tells which fault strands events.
_HALF_MINUTES = f"""
    WITH t0 AS (SELECT min(received_at) AS t0 FROM events e WHERE {LEVEL}),
    lat AS (
        SELECT floor(extract(epoch FROM e.received_at - t0.t0) / 30)::int AS half,
               extract(epoch FROM e.finished_at - e.received_at) * 1000 AS ms,
               extract(epoch FROM first.at - e.received_at) * 1000 AS wait_ms,
               e.attempts, e.id
          FROM events e CROSS JOIN t0
          LEFT JOIN LATERAL (SELECT min(st.completed_at) AS at FROM steps st
                              WHERE st.event_id = e.id) first ON true
         WHERE {LEVEL} AND e.state = 'completed')
    SELECT half, count(*) AS n,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99, max(ms) AS max,
           count(*) FILTER (WHERE ms > 1000) AS slow,
           count(*) FILTER (WHERE ms > 1000 AND wait_ms > 0.8 * ms) AS slow_waiting,
           count(*) FILTER (WHERE ms > 1000 AND attempts > 1) AS slow_reclaimed,
           (SELECT jsonb_object_agg(error_class, k) FROM (
               SELECT a.error_class, count(*) AS k FROM event_attempts a
                WHERE a.event_id IN (SELECT id FROM lat l2
                                      WHERE l2.half = lat.half AND l2.ms > 1000)
                GROUP BY a.error_class) errs) AS slow_failures
      FROM lat GROUP BY half ORDER BY half
"""


def _half_minutes(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    rows = conn.execute(_HALF_MINUTES, window("soak")).fetchall()
    return [
        {
            "minute": half / 2,
            "n": n,
            "p99_ms": round(p99),
            "max_ms": round(mx),
            "slow": slow,
            "slow_waiting": waiting,
            "slow_reclaimed": reclaimed,
            "slow_failures": failures or {},
        }
        for half, n, p99, mx, slow, waiting, reclaimed, failures in rows
    ]


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
        # The p99 of the first and the last window are compared; faults come between them,
        # so the last window tells whether the pipeline came back to where it started
        # after every fault (a fault's own delay is in the half-minute table).
        window = min(5.0, minutes / 3)
        fault_times = [
            60 * (window + 0.25 + k * args.fault_every)
            for k in range(int(minutes / args.fault_every) + 1)
            if window + 0.25 + k * args.fault_every < minutes - window - 0.25
        ]
        cycle = itertools.cycle(FAULTS)
        t0 = time.monotonic()
        load.start()
        next_sample = 0.0
        while load.is_alive():
            now = time.monotonic() - t0
            if now >= next_sample:
                samples.append(_observe(stack) | {"minute": round(now / 60, 2)})
                next_sample += 30
            if fault_times and now >= fault_times[0]:
                fault_times.pop(0)
                name, fault = next(cycle)
                print(f"  {now / 60:5.1f} min: {name}", flush=True)
                t = time.monotonic()
                fault(stack)
                faults.append(
                    {
                        "minute": round((t - t0) / 60, 2),
                        "fault": name,
                        "seconds": round(time.monotonic() - t, 1),
                    }
                )
            due = min([next_sample, *fault_times[:1]])
            load.join(timeout=max(0.1, due - (time.monotonic() - t0)))
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
                    f"< (SELECT min(received_at) FROM events) + interval '{window * 60} seconds'",
                    f"> (SELECT max(received_at) FROM events) - interval '{window * 60} seconds'",
                )
            ]
            half_minutes = _half_minutes(conn)
        first, last5 = windows[0]["p99"], windows[1]["p99"]
        ok = [s for s in samples if "error" not in s]
        xs = [s["minute"] for s in ok]
        memory = {
            kind: {
                "start": ok[0]["pss_mb"][kind] if ok else None,
                "end": ok[-1]["pss_mb"][kind] if ok else None,
                "slope_mb_per_min": round(_slope(xs, [s["pss_mb"][kind] for s in ok]), 3),
                # after the first half: past the warm-up (PostgreSQL's shared buffers and
                # caches fill as they are first touched)
                "slope_last_half": round(
                    _slope(xs[len(xs) // 2 :], [s["pss_mb"][kind] for s in ok][len(xs) // 2 :]),
                    3,
                ),
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
            "window_minutes": window,
            "p99_first5_ms": first,
            "p99_last5_ms": last5,
            "p99_ratio": round(last5 / first, 2) if first and last5 else None,
            "half_minutes": half_minutes,
            "samples": samples,
            **result,
        }
    finally:
        stack.stop()


def soak_table(s: dict[str, Any]) -> str:
    lines = [
        "| process | PSS start MiB | PSS end MiB | slope MiB/min | slope, second half |",
        "|---|---|---|---|---|",
    ]
    for kind, m in s["memory"].items():
        lines.append(
            f"| {kind} | {m['start']} | {m['end']} | {m['slope_mb_per_min']}"
            f" | {m['slope_last_half']} |"
        )
    lines.append("")
    lines.append(
        f"rate {s['rate']:g}/s for {s['minutes']} min; faults: "
        + ", ".join(f"{f['fault']} at {f['minute']} min" for f in s["faults"])
    )
    lines.append("")
    lines.append("| minute | events | p99 ms | max ms | over 1 s | of those waiting | reclaimed |")
    lines.append("|---|---|---|---|---|---|---|")
    for h in s["half_minutes"]:
        lines.append(
            f"| {h['minute']:g} | {h['n']} | {h['p99_ms']} | {h['max_ms']} | {h['slow']}"
            f" | {h['slow_waiting']} | {h['slow_reclaimed']} {h['slow_failures'] or ''} |"
        )
    lines.append("")
    lines.append(
        f"answers {s['statuses']} (refused then retried: {s['refused_then_retried']});"
        f" PostgreSQL connections at most {s['connections_max']}; unfinished work"
        f" {s['unfinished_slope_per_min']}/min; p99 receipt→completed first"
        f" {s['window_minutes']:g} min {fmt(s['p99_first5_ms'])} ms, last"
        f" {s['window_minutes']:g} min {fmt(s['p99_last5_ms'])} ms"
        f" ({s['p99_ratio']}x); lost {s['lost']}, doubled {s['doubled_events']},"
        f" effects {s['effects']} for {s['events']} events, callbacks at the sink"
        f" {s['sink_posts']} for {s['deliveries']} deliveries"
    )
    return "\n".join(lines)
