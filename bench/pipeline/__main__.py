"""The whole pipeline on one machine: what one box sustains when everything runs at once.

Every process as the Procfile starts it, on a private PostgreSQL cluster (initdb/pg_ctl,
default settings) and a private ``redis-server`` (doorbell, rate limits and broker):
``python -m web`` (``--webs`` of them, the sender taking them in turn), one worker
(``--concurrency 2``: two processes), the courier (threads, 16), beat, and a sink in its
own process answering 200 at once (``python -m bench.deliver sink``). The web processes
shed load past ``--max-backlog`` events waiting (``INBOX_MAX_BACKLOG``: 503 + Retry-After).

The load is an open loop of signed 1 KiB-or-less JSON events (``hmac`` scheme) at a fixed
offered rate, one request in ten a copy of an earlier one (same key, same bytes). The
playbook (below, loaded by every process through ``INBOX_PLAYBOOKS=bench.pipeline``) is the
2-step job of ``bench.limits``, and its second step also sends one callback: an
effect-free check, then an effect row keyed by the step key (``INSERT … ON CONFLICT DO
NOTHING`` on its own connection, in the same database) and one outbound callback to the
sink.

**The sweep** (default): offered rates in turn, each held for ``--seconds``; after each
level the run waits (up to ``--settle-deadline``) until nothing is pending or running and
no delivery waits, so the next level starts on an empty pipeline, and records that wait
(``drain_s``); then it reads from the database receipt→completed (``events.finished_at -
received_at``) and receipt→callback (the delivery's ``finished_at`` - the event's
``received_at``). A level holds when p99 receipt→completed ≤ 1 s, p99 receipt→callback
≤ 2 s, no 5xx, the sender kept the rate, and nothing is lost or doubled (every 2xx'd key
has one event, completed; one effect row per event; one callback per event, counted at
the sink). The highest rate that holds is the box's; then two more levels at 50 % and
90 % of it give the latencies there, ``--repeat`` rounds of them (two sweeps in a row hold
only if every round holds). CPU is split by process kind (each process tree's /proc CPU;
PostgreSQL's tree; the sender is this process). Then (``--overload``, default 1.5) one
level at that multiple of the first rate that did not hold: the answers (2xx; 503, each
with a Retry-After; anything else is a failure), the seconds from its end until a probe
event (one a second) is back under 1 s receipt→completed (bar: 60), and nothing admitted
lost or doubled (bench.pipeline.overload).

A sweep runs per web count (``--webs 1,2``) and per process count of the worker and the
courier: ``--workers`` (the worker line's ``--concurrency``) and ``--couriers`` (courier
processes, each with the Procfile's 16 threads), taken in pairs (a single value goes with
each of the other's); ``--scale 1,2,4`` is ``--workers 1,2,4 --couriers 1,2,4``.

**The soak** (``--soak-minutes M``): the same pipeline at ``--rate`` (default: 50 % of the
last sweep's sustainable rate, from bench/results/pipeline.json) for M minutes, with a
fault every ``--fault-every`` minutes, in turn: the worker SIGKILLed (and started again),
Redis restarted, PostgreSQL restarted (``pg_ctl restart -m fast``). A sender retries what
is refused (503, a reset connection), as a provider would. Every 30 s: each process kind's
resident memory, PostgreSQL's connections, the unfinished work. At the end: memory at start
and end and its slope, connections at most, unfinished work's slope, p99 receipt→completed
of the last five minutes against the first five, nothing lost or doubled.

    .venv/bin/python -m bench.pipeline [--rates 100,200,400,600,800] [--seconds 60] [--webs 1,2]
        [--scale 1,2,4 | --workers 2 --couriers 1] [--repeat 2] [--overload 1.5]
    .venv/bin/python -m bench.pipeline --soak-minutes 30 [--rate R] [--fault-every 5]

Prints tables, writes bench/results/pipeline.json (or pipeline-soak.json).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import Any

from bench.common import procs
from bench.pipeline.soak import soak, soak_table
from bench.pipeline.sweep import sweep
from bench.pipeline.tables import sweep_table

# The options a sweep's JSON records beside its runs.
OPTIONS = ("rates", "seconds", "repeat", "overload", "max_backlog", "settle_deadline")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--rates",
        default="100,200,300,400,500,600,800,1000",
        help="offered events/s, in turn, until one does not hold",
    )
    p.add_argument("--seconds", type=float, default=60.0, help="each level's length")
    p.add_argument("--webs", default="1,2", help="web processes, a sweep each")
    p.add_argument(
        "--workers", default="2", help="the worker's processes (--concurrency), a sweep each"
    )
    p.add_argument(
        "--couriers", default="1", help="courier processes (16 threads each), a sweep each"
    )
    p.add_argument("--scale", default=None, help="both the worker's and the courier's processes")
    p.add_argument("--repeat", type=int, default=1, help="rounds of the 50 %% and 90 %% levels")
    p.add_argument(
        "--overload",
        type=float,
        default=1.5,
        help="the overload level, times the first rate that did not hold (0: none)",
    )
    p.add_argument(
        "--max-backlog",
        type=int,
        default=5000,
        help="INBOX_MAX_BACKLOG for the web processes (0: no bound, the setting's default);"
        " 5000 is about 10 s of the box's drain, far above a held level's backlog",
    )
    p.add_argument(
        "--settle-deadline",
        type=float,
        default=600.0,
        help="seconds a level's backlog may take to drain before the next level starts",
    )
    p.add_argument(
        "--probe-deadline",
        type=float,
        default=180.0,
        help="seconds of probing for recovery after the overload (the bar is 60)",
    )
    p.add_argument("--soak-minutes", type=float, default=None)
    p.add_argument("--rate", type=float, default=None, help="the soak's rate")
    p.add_argument("--fault-every", type=float, default=5.0, help="minutes between faults")
    args = p.parse_args(argv)
    args.rates = [float(x) for x in args.rates.split(",")]
    args.webs = [int(x) for x in args.webs.split(",")]
    if args.scale is not None:
        args.workers = args.couriers = args.scale
    try:
        args.scales = scales(args.workers, args.couriers)
    except ValueError as exc:
        p.error(str(exc))
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    return args


def scales(workers: str, couriers: str) -> list[tuple[int, int]]:
    """(worker processes, courier processes) per sweep: the lists side by side, a single
    value repeated beside the other's, so ``--scale 1,2,4`` is three sweeps, not nine."""
    w, c = [int(x) for x in workers.split(",")], [int(x) for x in couriers.split(",")]
    if len(w) == 1:
        w = w * len(c)
    if len(c) == 1:
        c = c * len(w)
    if len(w) != len(c):
        raise ValueError("--workers and --couriers: as many values each, or one")
    return list(zip(w, c, strict=True))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    procs.RESULTS.mkdir(exist_ok=True)
    load0 = os.getloadavg()
    try:
        if args.soak_minutes is not None:
            s = soak(args)
            procs.write_report(procs.RESULTS / "pipeline-soak.json", {"load_before": load0, **s})
            print(soak_table(s))
            return 0
        runs: list[dict[str, Any]] = []
        options = {k: getattr(args, k) for k in OPTIONS}
        for webs in args.webs:
            for workers, couriers in args.scales:
                print(
                    f"sweep with {webs} web, {workers} worker and {couriers} courier process(es)",
                    flush=True,
                )
                runs.append(sweep(args, webs, workers, couriers))
                # Written after every sweep: a run of many sweeps keeps what it measured.
                procs.write_report(
                    procs.RESULTS / "pipeline.json",
                    {
                        "load_before": load0,
                        "load_after": os.getloadavg(),
                        "options": options,
                        "runs": runs,
                    },
                )
        print(sweep_table(runs))
        return 0
    except Exception:
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
