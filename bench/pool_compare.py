"""The store's pooling beside psycopg_pool's, per operation (issue #43: keep the simpler).

Three questions about the pool, each timed on one connection to one server (``SELECT
1``: the round trip, not the statement, is what differs), the best and median of seven
rounds taken in turns:

- a checkout and checkin alone: the engine's ``_DeadlinePool`` (SQLAlchemy's QueuePool)
  beside ``psycopg_pool.ConnectionPool.getconn``/``putconn``;
- the receiver's claim path: a claim connection (``inbox.store.db.claim_connections``,
  autocommit, beside the pool) beside a psycopg_pool of autocommit connections;
- a checkout from an exhausted pool with a 50 ms deadline: how long the caller waits,
  and how many threads are still alive afterwards (ours runs a late checkout in a thread
  of its own, which lives at most the pool's timeout; psycopg_pool takes a timeout per
  call).

And one about group commit (``inbox.store.db.group_commit``): a claim's wake-up, the
ticket's pre-acquired ``threading.Lock`` beside a ``concurrent.futures.Future``, made and
handed over in one thread and across two (no database).

    .venv/bin/python -m bench.pool_compare [--pg-url postgresql://postgres@127.0.0.1/postgres]

Reads nothing but ``SELECT 1``; writes nothing. JSON goes to bench/results/pool_compare.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import statistics
import threading
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psycopg_pool import ConnectionPool

from inbox.infra import config
from inbox.store.db.claim_connections import Connections
from inbox.store.db.engine import deadline, make_engine

RESULTS = Path(__file__).parent / "results" / "pool_compare.json"


def paired(ours: Callable[[], object], theirs: Callable[[], object], n: int) -> dict[str, Any]:
    """Microseconds per call, the best and the median of seven rounds of ``n`` each, the two
    taking turns round by round (AB, BA, ...) so that both see the same machine."""
    for fn in (ours, theirs):
        for _ in range(200):
            fn()
    rounds: dict[str, list[float]] = {"ours": [], "psycopg_pool": []}
    for i in range(7):
        order = [("ours", ours), ("psycopg_pool", theirs)]
        for name, fn in order if i % 2 == 0 else reversed(order):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            rounds[name].append((time.perf_counter() - t0) / n * 1e6)
    return {
        name: {"best_us": round(min(r), 1), "median_us": round(statistics.median(r), 1)}
        for name, r in rounds.items()
    }


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


def wake_ups(n: int = 20_000) -> dict[str, dict[str, float]]:
    """Nanoseconds per claim: a wake made, released and waited on, in one thread and with
    the release from another thread (the leader's), for a Lock and for a Future."""

    def lock_once() -> None:
        wake = threading.Lock()
        wake.acquire()
        wake.release()
        wake.acquire(timeout=1.0)

    def future_once() -> None:
        done: concurrent.futures.Future[int] = concurrent.futures.Future()
        done.set_result(1)
        done.result(timeout=1.0)

    def across(kind: str) -> float:
        locks = [threading.Lock() for _ in range(n)] if kind == "lock" else []
        for lock in locks:
            lock.acquire()
        futures: list[concurrent.futures.Future[int]] = (
            [concurrent.futures.Future() for _ in range(n)] if kind == "future" else []
        )

        def leader() -> None:
            for lock in locks:
                lock.release()
            for future in futures:
                future.set_result(1)

        t0 = time.perf_counter()
        thread = threading.Thread(target=leader)
        thread.start()
        for lock in locks:
            lock.acquire(timeout=5)
        for future in futures:
            future.result(timeout=5)
        thread.join()
        return (time.perf_counter() - t0) / n * 1e9

    one = {
        name: min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e9
        for name, fn in (("lock", lock_once), ("future", future_once))
    }
    return {
        kind: {
            "one_thread_ns": round(one[kind]),
            "across_threads_ns": round(min(across(kind) for _ in range(5))),
        }
        for kind in ("lock", "future")
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    p.add_argument("--n", type=int, default=3000, help="calls per round")
    args = p.parse_args()
    settings = dataclasses.replace(config.settings(), database_url=args.pg_url)
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
        "checkout_checkin": paired(ours_checkout, pg_checkout, args.n),
        "claim_round_trip": paired(ours_claim_path, pg_claim_path, args.n),
        "exhausted_50ms": {"ours": exhausted(ours_get, lambda c: c.close()),
                           "psycopg_pool": exhausted(pg_get, pool.putconn)},
        "group_commit_wake": wake_ups(),
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
