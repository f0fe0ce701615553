"""What each process costs to start: CPU from its exec until it can work.

Every process kind as the Procfile starts it (the web server with one worker process, the
worker with its 2 pool processes, the courier with 16 threads, beat) and two ``inbox``
commands, on a private PostgreSQL cluster and Redis, payloads sealed, started ``--repeats``
times each in turn; beside each kind, the floor its framework alone costs on the same
machine (``python -m web`` serving the hand-written receiver of ``bench/common/baselines.py``,
``celery worker`` of raw Celery's no-op app). A start's CPU is the user and system time of
its whole process group, read from /proc once it is ready (a web server's ``/healthz``
answers 200; a worker or courier logs ``ready``; beat logs ``Starting``), or of the command
itself for the CLI, which exits. Starts are what a deploy, a restart after a crash, a
scale-out and the test suite pay for every process (``make test`` starts some 460).

    .venv/bin/python -m bench.starts [--repeats 7] [--checkout PATH ...]

``--checkout`` (once per checkout, e.g. a ``git worktree`` of an older commit) starts each
of the project's kinds from that checkout too, in turn with this one's, so that a change
is measured in one run (the machine's speed drifts by a third between runs here): each
process runs in the checkout's directory, which comes first on its ``sys.path``, with this
checkout's interpreter and packages.

Prints a table of medians (and the spread), writes bench/results/starts.json.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import procs
from bench.common.cpu import TICK, probe_cpus, shown, wait_quiet

PROC = Path("/proc")


def group_seconds(pgid: int) -> float:
    """User and system CPU of every live process in the process group ``pgid``, plus what
    its ended children took (a pool process that ended is in its parent's)."""
    total = 0.0
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += sum(int(f) for f in fields[11:15]) / TICK
    return total


def _logged(proc: procs.Proc, words: str) -> Callable[[], bool]:
    def ready() -> bool:
        time.sleep(0.02)
        return words in proc.log_path.read_text(errors="replace")

    return ready


def start_once(kind: str, env: dict[str, str], cwd: Path = procs.ROOT) -> float:
    """One start of ``kind`` in ``cwd``: its CPU seconds until ready, then it is stopped."""
    env = {**env, "PYTHONPATH": str(cwd)} if cwd != procs.ROOT else env
    if kind.startswith("inbox "):  # a CLI command runs to its end
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        cmd = [sys.executable, "-m", "inbox.cli", *kind.split()[1:]]
        subprocess.run(cmd, env={**os.environ, **env}, cwd=cwd, check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    celery = [str(procs.BIN / "celery"), "-A"]
    info = ["--loglevel", "INFO", "--without-gossip", "--without-mingle"]
    until_ready: Callable[[], None]
    if kind in ("web", "web floor"):
        app = "web.wsgi:app" if kind == "web" else "bench.common.baselines:handwritten"
        port = procs.free_port()
        web_env = {"WEB_GRACEFUL_TIMEOUT": "5", **env}
        proc = procs.Proc(procs.web_args(app, port, 1, 24), web_env, "start-web", cwd=cwd)
        until_ready = functools.partial(procs.wait_http, proc, port, 120, kind == "web floor")
    elif kind in ("worker", "courier", "worker floor"):
        app, queue, pool = {
            "worker": ("workers.app", "inbox", ["--concurrency", "2"]),
            "courier": ("workers.app", "deliveries", ["--pool", "threads", "--concurrency", "16"]),
            "worker floor": (
                "bench.common.baselines:raw_app",
                "bench_idle",
                ["--concurrency", "2"],
            ),
        }[kind]
        node = f"start-{time.monotonic_ns()}@%h"
        args = [*celery, app, "worker", "-Q", queue, *pool, "-n", node, *info]
        proc = procs.Proc(args, env, "start-" + kind.replace(" ", "-"), cwd=cwd)
        until_ready = functools.partial(procs.wait_ready, proc, kind, 120, _logged(proc, " ready."))
    elif kind == "beat":
        schedule = procs.LOGS / f"bench-start-beat-{os.getpid()}.schedule"
        args = [*celery, "workers.app", "beat", "--loglevel", "INFO", "--schedule", str(schedule)]
        proc = procs.Proc(args, env, "start-beat", cwd=cwd)
        until_ready = functools.partial(
            procs.wait_ready, proc, kind, 120, _logged(proc, "Starting")
        )
    else:
        raise ValueError(kind)
    try:  # whatever happens, the process is stopped
        until_ready()
        # A pool process forks as the worker logs ready: let it finish its own start.
        time.sleep(0.3)
        return group_seconds(proc.pid)
    finally:
        proc.stop(signal.SIGKILL)


KINDS = ("web", "worker", "courier", "beat", "inbox --help", "inbox partitions")
FLOORS = ("web floor", "worker floor")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.starts", description=__doc__)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--pg-url", default=os.environ.get("BENCH_PG_URL"))
    p.add_argument(
        "--checkout",
        action="append",
        default=[],
        type=Path,
        help="start the project's processes from this checkout too, in turn (repeat)",
    )
    p.add_argument("--out", type=Path, default=procs.RESULTS / "starts.json")
    a = p.parse_args(argv)
    procs.RESULTS.mkdir(exist_ok=True)
    procs.use_own_kek()
    quiet = wait_quiet(120)
    probe = probe_cpus()
    redis = procs.PrivateRedis("start-redis")
    trees = [procs.ROOT, *(c.resolve() for c in a.checkout)]
    runs = [(k, t) for k in KINDS for t in trees] + [(k, procs.ROOT) for k in FLOORS]
    results: dict[str, list[float]] = {label(k, t): [] for k, t in runs}
    try:
        with procs.source_database(a.pg_url, "inbox_starts", ("t", "s", "secret")) as url:
            env = {
                "DATABASE_URL": url,
                "REDIS_URL": redis.url,
                "BENCH_BROKER_URL": redis.url,
                "PYTHONPATH": str(procs.ROOT),
            }
            for _ in range(a.repeats):  # the kinds take turns, so drift hits each alike
                for kind, tree in runs:
                    results[label(kind, tree)].append(start_once(kind, env, tree))
    finally:
        redis.stop()
    show(results, quiet, probe)
    report: dict[str, Any] = {
        "repeats": a.repeats,
        "checkouts": [str(t) for t in trees],
        "load_before": quiet,
        "probe": probe,
        "cpu_seconds": results,
        "medians": {k: statistics.median(v) for k, v in results.items()},
    }
    procs.write_report(a.out, report)
    return 0


def label(kind: str, tree: Path) -> str:
    return kind if tree == procs.ROOT else f"{kind} ({tree})"


def show(results: dict[str, list[float]], quiet: dict[str, float], probe: list[float]) -> None:
    print(f"load before: {quiet}; speed probe: {shown(probe)}")
    print("| process | CPU to ready, median s | spread s |")
    print("|---|---|---|")
    for kind, values in results.items():
        print(f"| {kind} | {statistics.median(values):.2f} | {min(values):.2f}-{max(values):.2f} |")


if __name__ == "__main__":
    sys.exit(main())
