"""The store's pooling beside psycopg_pool's, per operation (issue #43: keep the simpler).

Three questions, each timed on one connection to one server (``SELECT 1``: the round
trip, not the statement, is what differs), the best and median of five rounds:

- a checkout and checkin alone: the engine's ``_DeadlinePool`` (SQLAlchemy's QueuePool)
  beside ``psycopg_pool.ConnectionPool.getconn``/``putconn``;
- the receiver's claim path: a claim connection (``inbox.store.db.claim_connections``,
  autocommit, beside the pool) beside a psycopg_pool of autocommit connections;
- a checkout from an exhausted pool with a 50 ms deadline: how long the caller waits,
  and how many threads are still alive afterwards (ours runs a late checkout in a thread
  of its own, which lives at most the pool's timeout; psycopg_pool takes a timeout per
  call).

    .venv/bin/python -m bench.pool_compare [--pg-url postgresql://postgres@127.0.0.1/postgres]

Reads nothing but ``SELECT 1``; writes nothing. JSON goes to bench/results/pool_compare.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psycopg_pool import ConnectionPool

from inbox.infra.config import Settings
from inbox.store.db.claim_connections import Connections
from inbox.store.db.engine import deadline, make_engine

RESULTS = Path(__file__).parent / "results" / "pool_compare.json"


def per_op(fn: Callable[[], object], n: int) -> dict[str, float]:
    """Microseconds per call: the best and the median of five rounds of ``n``."""
    for _ in range(200):
        fn()
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return {"best_us": round(min(rounds), 1), "median_us": round(statistics.median(rounds), 1)}


def exhausted(
    get: Callable[[float | None], Any], release: Callable[[Any], None], n: int = 40
) -> dict[str, float]:
    """``n`` checkouts with a 50 ms deadline while the one connection is out."""
    taken = get(None)
    waits, before, peak = [], threading.active_count(), 0
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            release(get(0.05))
        except Exception:  # the timeout: what is measured is how long it took
            pass
        waits.append((time.perf_counter() - t0) * 1000)
        peak = max(peak, threading.active_count() - before)
    release(taken)
    return {
        "median_ms": round(statistics.median(waits), 1),
        "max_ms": round(max(waits), 1),
        "threads_alive_at_peak": peak,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    p.add_argument("--n", type=int, default=3000, help="calls per round")
    args = p.parse_args()
    settings = dataclasses.replace(Settings.from_env(), database_url=args.pg_url)
    engine = make_engine(settings, pool_size=1)
    claim_conns = Connections(engine)
    pool = ConnectionPool(args.pg_url, min_size=1, max_size=1, open=True)
    auto = ConnectionPool(args.pg_url, min_size=1, max_size=1, open=True,
                          kwargs={"autocommit": True})  # fmt: skip
    pool.wait()
    auto.wait()

    def ours_checkout() -> None:
        engine.raw_connection().close()

    def pg_checkout() -> None:
        pool.putconn(pool.getconn(timeout=2))

    def ours_claim_path() -> None:
        held = claim_conns._take(time.monotonic() + 2)
        held.driver.execute("SELECT 1").fetchone()
        claim_conns._idle.append(held)

    def pg_claim_path() -> None:
        with auto.connection(timeout=2) as conn:
            conn.execute("SELECT 1").fetchone()

    def ours_get(seconds: float | None) -> Any:
        if seconds is None:
            return engine.raw_connection()
        with deadline(seconds):
            return engine.raw_connection()

    def pg_get(seconds: float | None) -> Any:
        return pool.getconn(timeout=seconds or 2)

    found: dict[str, Any] = {
        "load_average": os.getloadavg(),
        "checkout_checkin": {"ours": per_op(ours_checkout, args.n),
                             "psycopg_pool": per_op(pg_checkout, args.n)},
        "claim_round_trip": {"ours": per_op(ours_claim_path, args.n),
                             "psycopg_pool": per_op(pg_claim_path, args.n)},
        "exhausted_50ms": {"ours": exhausted(ours_get, lambda c: c.close()),
                           "psycopg_pool": exhausted(pg_get, pool.putconn)},
    }  # fmt: skip
    pool.close()
    auto.close()
    claim_conns.close()
    engine.dispose()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(found, indent=2) + "\n")
    print(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
