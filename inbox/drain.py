"""The daemons' bodies as plain functions: each ``*_once`` does one round and returns counts.

Celery tasks in ``workers/`` are thin shells over these; tests call them directly.
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Engine

from inbox import metrics
from inbox.config import Settings
from inbox.runner import RunConfig, run_claimed
from inbox.store import queue


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_config(settings: Settings) -> RunConfig:
    return RunConfig(
        lease_seconds=settings.lease_seconds,
        retry_base_seconds=settings.retry_base_seconds,
    )


@dataclass
class DrainResult:
    claimed: int = 0
    states: Counter[str] = field(default_factory=Counter)


def drain_once(
    engine: Engine,
    settings: Settings,
    owner: str | None = None,
    notify: Callable[[set[int]], None] | None = None,
) -> DrainResult:
    """Claim one batch of due events and run each; returns what became of them."""
    with engine.begin() as conn:
        claims = queue.claim(
            conn, owner or worker_id(), settings.batch_size, settings.lease_seconds
        )
    result = DrainResult(claimed=len(claims))
    cfg = run_config(settings)
    renewed = time.monotonic()
    for i, c in enumerate(claims):
        if time.monotonic() - renewed > settings.lease_seconds / 3:
            # The rest of the batch is still waiting its turn: keep its leases.
            with engine.begin() as conn:
                queue.extend(conn, claims[i:], settings.lease_seconds)
            renewed = time.monotonic()
        result.states[run_claimed(engine, c, cfg, notify=notify)] += 1
    return result


@dataclass(frozen=True)
class SweepResult:
    requeued: int
    quarantined: int
    due: int


def sweep_once(engine: Engine) -> SweepResult:
    """The lifeline: expired leases go back to the queue; report how much is due."""
    with engine.begin() as conn:
        requeued, quarantined = queue.sweep_expired(conn)
        due = queue.due_count(conn)
    metrics.record_sweep(requeued, quarantined)
    return SweepResult(requeued, quarantined, due)
