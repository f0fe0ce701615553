"""The offered-load sweep: the highest rate that holds, and the latencies below it."""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.pipeline.measure import Sender, outcome, sink_posts
from bench.pipeline.playbook import BARS
from bench.pipeline.stack import Stack, cpu_seconds


def level(stack: Stack, name: str, rate: float, seconds: float) -> dict[str, Any]:
    sender = Sender(stack)
    posts0 = sink_posts(stack)
    before, t0 = cpu_seconds(stack), time.monotonic()
    offered = sender.run(name, rate, seconds)
    result = outcome(stack, name, sender)
    after, elapsed = cpu_seconds(stack), time.monotonic() - t0
    processed = max(result["completed"], 1)
    cpu_ms = {k: round((after[k] - before[k]) * 1000 / processed, 3) for k in after if k in before}
    statuses = {str(k): v for k, v in sorted(sender.statuses.items())}
    fivexx = sum(v for k, v in sender.statuses.items() if k >= 500 or k == 0)
    posts = sink_posts(stack) - posts0
    r = {
        "level": name,
        "rate": rate,
        "offered_per_s": round(offered, 1),
        "statuses": statuses,
        "5xx": fivexx,
        "sink_posts": posts,
        "cpu_ms_per_event": cpu_ms,
        "elapsed_s": round(elapsed, 1),
        **result,
    }
    p99c, p99d = result["completed_ms"]["p99"], result["callback_ms"]["p99"]
    r["holds"] = bool(
        fivexx == 0
        and offered >= 0.95 * rate
        and result["lost"] == 0
        and result["doubled_events"] == 0
        and result["effects"] == result["events"]
        and result["deliveries"] == result["events"]
        and posts == result["delivered"]
        and p99c is not None
        and p99c <= BARS["completed_p99_ms"]
        and p99d is not None
        and p99d <= BARS["callback_p99_ms"]
    )
    return r


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def show(r: dict[str, Any]) -> None:
    c, d = r["completed_ms"], r["callback_ms"]
    print(
        f"  {r['level']:>14} offered {r['offered_per_s']:>7.1f}/s  completed p50/p99"
        f" {fmt(c['p50'])}/{fmt(c['p99'])} ms  callback p50/p99 {fmt(d['p50'])}/"
        f"{fmt(d['p99'])} ms  5xx {r['5xx']}  lost {r['lost']}  holds {r['holds']}",
        flush=True,
    )


def sweep(args: argparse.Namespace, webs: int) -> dict[str, Any]:
    stack = Stack(webs)
    levels: list[dict[str, Any]] = []
    try:
        stack.start()
        # warm-up: every process has run the path once
        levels_warm = level(stack, f"w{webs}-warm", 50, 5)
        del levels_warm
        best = 0.0
        for rate in args.rates:
            r = level(stack, f"w{webs}-r{rate:g}", rate, args.seconds)
            levels.append(r)
            show(r)
            if r["holds"]:
                best = rate
            else:
                break
        at = {}
        for share in (0.5, 0.9):
            if best:
                r = level(stack, f"w{webs}-at{int(share * 100)}", best * share, args.seconds)
                show(r)
                at[f"{int(share * 100)}%"] = r
        return {"webs": webs, "sustained_per_s": best, "levels": levels, "at": at}
    finally:
        stack.stop()


def sweep_table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| web processes | sustained events/s | at | offered/s | completed p50 / p99 ms"
        " | callback p50 / p99 ms | CPU ms/event: web, worker, courier, beat, PostgreSQL,"
        " Redis, sink, sender |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for share, r in run["at"].items():
            c, d, m = r["completed_ms"], r["callback_ms"], r["cpu_ms_per_event"]
            kinds = ("web", "worker", "courier", "beat", "postgres", "redis", "sink", "sender")
            split = ", ".join(f"{m.get(k, 0):.2f}" for k in kinds)
            lines.append(
                f"| {run['webs']} | {run['sustained_per_s']:g} | {share} | {r['offered_per_s']}"
                f" | {fmt(c['p50'])} / {fmt(c['p99'])} | {fmt(d['p50'])} / {fmt(d['p99'])}"
                f" | {split} |"
            )
        if not run["at"]:
            lines.append(f"| {run['webs']} | none held | | | | | |")
    return "\n".join(lines)
