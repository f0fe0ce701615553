"""The offered-load sweep: the highest rate that holds, the latencies below it (``--repeat``
rounds of them), and one level past it (``bench.pipeline.overload``)."""

from __future__ import annotations

import argparse
from typing import Any

from bench.pipeline.levels import level, show
from bench.pipeline.overload import overload
from bench.pipeline.stack import Stack

SHARES = (0.5, 0.9)


def rounds(
    stack: Stack, tag: str, best: float, args: argparse.Namespace
) -> list[dict[str, dict[str, Any]]]:
    """The 50 % and 90 % levels, ``--repeat`` times over: a rate holds on two sweeps in a
    row only if each round holds it, not one lucky round."""
    out = []
    for n in range(1, args.repeat + 1):
        at = {}
        for share in SHARES:
            pct = f"{share:.0%}"
            name = f"{tag}-at{pct[:-1]}-{n}"
            r = level(stack, name, best * share, args.seconds, args.settle_deadline)
            r["round"] = n
            show(r)
            at[pct] = r
        out.append(at)
    return out


def tag_of(webs: int, workers: int, couriers: int) -> str:
    """A run's prefix for its level names: web, worker and courier processes."""
    return f"w{webs}p{workers}c{couriers}"


def sweep(args: argparse.Namespace, webs: int, workers: int, couriers: int) -> dict[str, Any]:
    """The rates in turn until one does not hold, the 50 % and 90 % rounds, then (with
    ``--overload``) one level past saturation; one stack for all of it."""
    stack = Stack(webs, worker_procs=workers, courier_procs=couriers, max_backlog=args.max_backlog)
    tag = tag_of(webs, workers, couriers)
    levels: list[dict[str, Any]] = []
    try:
        stack.start()
        # warm-up: every process has run the path once
        level(stack, f"{tag}-warm", 50, 5, args.settle_deadline)
        stack.analyze()
        best, failed = 0.0, None
        for rate in args.rates:
            r = level(stack, f"{tag}-r{rate:g}", rate, args.seconds, args.settle_deadline)
            levels.append(r)
            show(r)
            if not r["holds"]:
                failed = rate
                break
            best = rate
        held = rounds(stack, tag, best, args) if best else []
        over = None
        if args.overload:
            # Past the first rate that did not hold (or, if all held, past the last tried).
            over = overload(stack, tag, args.overload * (failed or args.rates[-1]), args)
        return {
            "webs": webs,
            "workers": workers,
            "couriers": couriers,
            "max_backlog": args.max_backlog,
            "sustained_per_s": best,
            "first_failed_per_s": failed,
            "levels": levels,
            "at": held[0] if held else {},
            "rounds": held,
            "rounds_held": bool(held) and all(r["holds"] for at in held for r in at.values()),
            "overload": over,
        }
    finally:
        stack.stop()
