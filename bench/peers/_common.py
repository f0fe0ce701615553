"""What every peer module shares: its command line, the ready/go handshake with the
orchestrator and the effect row. Runs in .venv-peers; imports nothing of the project."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

EFFECT_SQL = "INSERT INTO bench_effects (step_key) VALUES (%s) ON CONFLICT DO NOTHING"
EFFECT_SQL_DOLLAR = "INSERT INTO bench_effects (step_key) VALUES ($1) ON CONFLICT DO NOTHING"
ENQUEUE_CHUNK = 1000


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=("prepare", "work"))
    p.add_argument("--url", required=True, help="the run's database")
    p.add_argument("--workload", choices=("noop", "2step"), required=True)
    p.add_argument("--events", type=int, default=0, help="prepare: jobs to enqueue")
    each = "prepare: enqueue one job per transaction over this many connections (0: in chunks)"
    p.add_argument("--enqueue-each", type=int, default=0, help=each)
    p.add_argument("--index", type=int, default=0, help="work: this worker's number")
    p.add_argument("--ready", type=Path, help="work: touched once set up")
    p.add_argument("--go", type=Path, help="work: start consuming once it exists")
    p.add_argument("--driver", default="asyncpg", help="pgqueuer: asyncpg or psycopg")
    p.add_argument("--batch-size", type=int, default=100, help="pgqueuer: jobs per dequeue")
    p.add_argument("--concurrency", type=int, default=10, help="jobs in flight per process")
    p.add_argument("--polling", type=float, default=0.1, help="dbos: queue polling interval, s")
    return p.parse_args(argv)


def keys(n: int) -> list[str]:
    """The events' own ids; a step's key is ``<id>:<step>``."""
    return [f"evt_{i}" for i in range(n)]


def ready_then_wait(args: argparse.Namespace) -> None:
    assert args.ready is not None and args.go is not None
    args.ready.touch()
    while not args.go.exists():
        time.sleep(0.005)


async def ready_then_wait_async(args: argparse.Namespace) -> None:
    await asyncio.to_thread(ready_then_wait, args)
