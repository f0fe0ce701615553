"""The whole pipeline on one machine: what one box sustains when everything runs at once.

Every process as the Procfile starts it, on a private PostgreSQL cluster (initdb/pg_ctl,
default settings) and a private ``redis-server`` (doorbell, rate limits and broker):
``python -m web`` (``--webs`` of them, the sender taking them in turn), one worker
(``--concurrency 2``: two processes), the courier (threads, 16), beat, and a sink in its
own process answering 200 at once (``python -m bench.deliver sink``).

The load is an open loop of signed 1 KiB-or-less JSON events (``hmac`` scheme) at a fixed
offered rate, one request in ten a copy of an earlier one (same key, same bytes). The
playbook (below, loaded by every process through ``INBOX_PLAYBOOKS=bench.pipeline``) is the
2-step job of ``bench.limits``, and its second step also sends one callback: an
effect-free check, then an effect row keyed by the step key (``INSERT … ON CONFLICT DO
NOTHING`` on its own connection, in the same database) and one outbound callback to the
sink.

**The sweep** (default): offered rates in turn, each held for ``--seconds``; after each
level the run waits until that level's events and callbacks are done, then reads from the
database receipt→completed (``events.finished_at - received_at``) and receipt→callback
(the delivery's ``finished_at`` - the event's ``received_at``). A level holds when p99
receipt→completed ≤ 1 s, p99 receipt→callback ≤ 2 s, no 5xx, the sender kept the rate,
and nothing is lost or doubled (every 2xx'd key has one event, completed; one effect row
per event; one callback per event, counted at the sink). The highest rate that holds is
the box's; then two more levels at 50 % and 90 % of it give the latencies there. CPU is
split by process kind (each process tree's /proc CPU; PostgreSQL's tree; the sender is
this process). ``--webs 1,2`` repeats the whole sweep with a second web process.

**The soak** (``--soak-minutes M``): the same pipeline at ``--rate`` (default: 50 % of the
last sweep's sustainable rate, from bench/results/pipeline.json) for M minutes, with a
fault every ``--fault-every`` minutes, in turn: the worker SIGKILLed (and started again),
Redis restarted, PostgreSQL restarted (``pg_ctl restart -m fast``). A sender retries what
is refused (503, a reset connection), as a provider would. Every 30 s: each process kind's
resident memory, PostgreSQL's connections, the unfinished work. At the end: memory at start
and end and its slope, connections at most, unfinished work's slope, p99 receipt→completed
of the last five minutes against the first five, nothing lost or doubled.

    .venv/bin/python -m bench.pipeline [--rates 100,200,400,600,800] [--seconds 60] [--webs 1,2]
    .venv/bin/python -m bench.pipeline --soak-minutes 30 [--rate R] [--fault-every 5]

Prints tables, writes bench/results/pipeline.json (or pipeline-soak.json).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from bench.common import procs
from bench.pipeline.soak import soak, soak_table
from bench.pipeline.sweep import sweep, sweep_table


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--rates",
        default="100,200,300,400,500,600,800,1000",
        help="offered events/s, in turn, until one does not hold",
    )
    p.add_argument("--seconds", type=float, default=60.0, help="each level's length")
    p.add_argument("--webs", default="1,2", help="web processes, a sweep each")
    p.add_argument("--soak-minutes", type=float, default=None)
    p.add_argument("--rate", type=float, default=None, help="the soak's rate")
    p.add_argument("--fault-every", type=float, default=5.0, help="minutes between faults")
    args = p.parse_args(argv)
    args.rates = [float(x) for x in args.rates.split(",")]
    args.webs = [int(x) for x in args.webs.split(",")]
    return args


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
        runs = []
        for webs in args.webs:
            print(f"sweep with {webs} web process(es)", flush=True)
            runs.append(sweep(args, webs))
        procs.write_report(
            procs.RESULTS / "pipeline.json",
            {"load_before": load0, "load_after": os.getloadavg(), "runs": runs},
        )
        print(sweep_table(runs))
        return 0
    except Exception:
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
