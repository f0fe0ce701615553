"""In-process drain profiling: where one event's time goes, without Celery in the way.

- ``commit_cost``: round trip and durable single-row commit latency on this server.
- ``measure``: loops ``inbox.drain.drain_once`` (or the batched prototype) over
  pending events in this process, counting statements, transactions and commit time
  per event; optionally under cProfile.
- ``measure_procs``: the same loop in N forked processes at once.

- ``claim_cost``: the claim statement alone over a backlog, with JIT on and off, joined
  as shipped or by primary key as in the prototype (``_drain_batched``).
"""

from __future__ import annotations

import cProfile
import io
import multiprocessing
import os
import pstats
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import _drain_batched as batched
import _drain_playbooks  # noqa: F401 - registers the bench-noop playbook
import psycopg
from _drain_db import BenchSource, insert_pending, reset_events
from sqlalchemy import Engine, event, text

from inbox.infra.config import Settings
from inbox.services.drain import DrainResult, drain_once
from inbox.store import queue
from inbox.store.engine import make_engine

DrainFn = Callable[[Engine, Settings, str | None], DrainResult]

# -- measuring ---------------------------------------------------------------------------

_LABELS = (
    ("WITH fair AS", "claim"),
    ("FROM tenants WHERE NOT disabled", "claim: count tenants"),
    ("jsonb_to_recordset", "batch complete (prototype)"),
    ("SET LOCAL jit", "SET LOCAL jit (prototype)"),
    ("WHERE (id, fence) IN", "extend"),
    ("unnest(CAST(%(ids)s", "batch load (prototype)"),
    ("jsonb_object_agg", "load"),
    ("INSERT INTO steps", "record_steps"),
    ("SET state = 'completed'", "complete"),
    ("SELECT 1 FROM events", "check_live"),
)


def _label(statement: str) -> str:
    for marker, name in _LABELS:
        if marker in statement:
            return name
    return statement.split(None, 1)[0].upper() if statement.strip() else "?"


class _Counters:
    """Statements (by kind), transactions and commit time on one engine."""

    def __init__(self, engine: Engine) -> None:
        self.statements: Counter[str] = Counter()
        self.statement_s: Counter[str] = Counter()
        self.begins = 0
        self.commits = 0
        self.commit_s = 0.0
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)
        event.listen(engine, "begin", self._begin)
        dialect = engine.dialect
        plain_commit = dialect.do_commit

        def timed_commit(dbapi_connection: Any) -> None:
            t = time.perf_counter()
            plain_commit(dbapi_connection)
            self.commit_s += time.perf_counter() - t
            self.commits += 1

        dialect.do_commit = timed_commit  # type: ignore[method-assign]

    def _before(self, conn, cursor, statement, params, context, many):  # type: ignore[no-untyped-def]
        conn.info["bench_t"] = time.perf_counter()

    def _after(self, conn, cursor, statement, params, context, many):  # type: ignore[no-untyped-def]
        label = _label(statement)
        self.statements[label] += 1
        self.statement_s[label] += time.perf_counter() - conn.info.pop("bench_t")

    def _begin(self, conn) -> None:  # type: ignore[no-untyped-def]
        self.begins += 1

    def per_event(self, n: int) -> dict[str, Any]:
        n = max(n, 1)
        return {
            "statements_per_event": round(sum(self.statements.values()) / n, 3),
            "transactions_per_event": round(self.begins / n, 3),
            "commits_per_event": round(self.commits / n, 3),
            "ms_per_commit": round(self.commit_s / max(self.commits, 1) * 1000, 3),
            "commit_ms_per_event": round(self.commit_s / n * 1000, 3),
            "by_statement": {
                k: {
                    "per_event": round(v / n, 3),
                    "ms_each": round(self.statement_s[k] / v * 1000, 3),
                }
                for k, v in self.statements.most_common()
            },
        }


def _settings(url: str, batch_size: int) -> Settings:
    return Settings(database_url=url, batch_size=batch_size, lease_seconds=60)


def _drain_all(engine: Engine, settings: Settings, fn: DrainFn, owner: str) -> Counter[str]:
    states: Counter[str] = Counter()
    while True:
        r = fn(engine, settings, owner)
        states.update(r.states)
        if r.claimed == 0:
            return states


def _top(profile: cProfile.Profile, n: int) -> list[str]:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(n)
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return [line.rstrip() for line in lines[start:] if line.strip()]


def measure(
    url: str,
    src: BenchSource,
    n: int,
    batch_size: int,
    fn: DrainFn,
    profile: bool = False,
) -> dict[str, Any]:
    """Drain n pending events in this process; per-event statement and commit figures."""
    with psycopg.connect(url, autocommit=True) as conn:
        reset_events(conn)
        insert_pending(conn, src, n, f"prof{time.monotonic_ns()}")
    settings = _settings(url, batch_size)
    engine = make_engine(settings, pool_size=2)
    counters = _Counters(engine)
    prof = cProfile.Profile() if profile else None
    t = time.perf_counter()
    if prof is not None:
        prof.enable()
    states = _drain_all(engine, settings, fn, f"bench-prof:{os.getpid()}")
    if prof is not None:
        prof.disable()
    elapsed = time.perf_counter() - t
    engine.dispose()
    out: dict[str, Any] = {
        "events": n,
        "states": dict(states),
        "seconds": round(elapsed, 3),
        "events_per_s": round(n / elapsed, 1),
        "ms_per_event": round(elapsed / n * 1000, 3),
        **counters.per_event(n),
    }
    if prof is not None:
        out["cprofile_top_tottime"] = _top(prof, 25)
    return out


def _child(url: str, batch_size: int, fn_name: str, go: Any, done: Any) -> None:
    settings = _settings(url, batch_size)
    engine = make_engine(settings, pool_size=2)
    with engine.connect() as conn:  # connect before the start signal
        conn.execute(text("SELECT 1"))
    fn = FUNCTIONS[fn_name]
    go.wait()
    states = _drain_all(engine, settings, fn, f"bench-prof:{os.getpid()}")
    engine.dispose()
    done.put(dict(states))


def measure_procs(
    url: str, src: BenchSource, n: int, batch_size: int, fn_name: str, procs: int
) -> dict[str, Any]:
    """Drain n pending events with ``procs`` forked processes looping the drain at once."""
    with psycopg.connect(url, autocommit=True) as conn:
        reset_events(conn)
        insert_pending(conn, src, n, f"mp{time.monotonic_ns()}")
    ctx = multiprocessing.get_context("fork")
    go, done = ctx.Event(), ctx.Queue()
    children = [
        ctx.Process(target=_child, args=(url, batch_size, fn_name, go, done)) for _ in range(procs)
    ]
    for p in children:
        p.start()
    time.sleep(1.0)
    t = time.perf_counter()
    go.set()
    states: Counter[str] = Counter()
    for _ in children:
        states.update(done.get(timeout=600))
    elapsed = time.perf_counter() - t
    for p in children:
        p.join(10)
    return {
        "drain": fn_name,
        "events": n,
        "procs": procs,
        "states": dict(states),
        "seconds": round(elapsed, 3),
        "events_per_s": round(n / elapsed, 1),
    }


FUNCTIONS: dict[str, DrainFn] = {"current": drain_once, "batched": batched.drain_batched_once}


def commit_cost(url: str, rounds: int = 300) -> dict[str, float]:
    """Median round trip of SELECT 1, and of a one-row UPDATE + COMMIT (a durable commit)."""
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TEMP TABLE bench_commit (id int PRIMARY KEY, n int)")
        conn.execute("INSERT INTO bench_commit VALUES (1, 0)")
        conn.commit()
        rtt, commit = [], []
        for _ in range(rounds):
            t = time.perf_counter()
            conn.execute("SELECT 1")
            rtt.append(time.perf_counter() - t)
            conn.rollback()
        # A temp table's writes are not WAL-logged: use a real one for the commit cost.
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit_real (id int PRIMARY KEY, n int)")
        conn.execute("INSERT INTO bench_commit_real VALUES (1, 0) ON CONFLICT DO NOTHING")
        conn.commit()
        for _ in range(rounds):
            t = time.perf_counter()
            conn.execute("UPDATE bench_commit_real SET n = n + 1 WHERE id = 1")
            conn.commit()
            commit.append(time.perf_counter() - t)
        conn.execute("DROP TABLE bench_commit_real")
        conn.commit()
    rtt.sort()
    commit.sort()
    return {
        "select1_ms_p50": round(rtt[len(rtt) // 2] * 1000, 3),
        "update_commit_ms_p50": round(commit[len(commit) // 2] * 1000, 3),
        "update_commit_ms_p90": round(commit[int(len(commit) * 0.9)] * 1000, 3),
    }


def claim_cost(url: str, src: BenchSource, pending: int, rounds: int = 7) -> dict[str, Any]:
    """Median ms of one claim of 100 over ``pending`` due events (rolled back each time)."""
    with psycopg.connect(url, autocommit=True) as conn:
        reset_events(conn)
        insert_pending(conn, src, pending, f"claim{time.monotonic_ns()}")
    settings = _settings(url, 100)
    engine = make_engine(settings, pool_size=1)
    params = {"owner": "bench", "limit": 100, "per_tenant": 100, "lease": 60}
    out: dict[str, Any] = {"pending": pending, "rewritten": batched.CLAIM_REWRITTEN}
    for jit in ("on", "off"):
        for name, stmt in (("shipped", queue._CLAIM), ("by_key", batched._CLAIM)):
            times = []
            for _ in range(rounds):
                with engine.connect() as conn:
                    conn.execute(text(f"SET jit = {jit}"))
                    conn.commit()
                    t = time.perf_counter()
                    claimed = len(conn.execute(stmt, params).all())
                    times.append(time.perf_counter() - t)
                    conn.rollback()
            times.sort()
            out[f"{name}_jit_{jit}_ms"] = round(times[len(times) // 2] * 1000, 2)
            out["claimed"] = claimed
    with engine.connect() as conn:
        conn.execute(text("RESET jit"))
        conn.commit()
    engine.dispose()
    return out
