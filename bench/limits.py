"""The limit, stated: PostgreSQL's commit ceiling on this machine beside the commits and
round trips the inbox spends per event on each path, so each throughput figure can be
read as a fraction of what the database allows.

1. The ceiling: ``pgbench -f`` with a one-row ``BEGIN; INSERT; COMMIT`` script at
   ``--clients`` (1..N, ``-j`` up to the cores), ``--seconds`` each, in a database of its
   own on the run's server; the best level's transactions/s is the ceiling. The server's
   durability settings (fsync, synchronous_commit, the WAL's) are printed and stored.
2. The counts: the product's own code in this process against a fresh migrated database
   on the same server, one request or one round at a time: the receiver
   (``web.app.create_app`` through Flask's test client, no broker), ``drain_once`` and
   ``deliver_once`` (to a local sink answering 200 at once). Per path, the database's
   ``pg_stat_database.xact_commit`` and ``pg_stat_statements``' calls (every statement,
   BEGIN and COMMIT included; without a pooler each is one round trip) before and after
   ``--events`` events, read from the maintenance database once every connection of the
   run's database has closed, divided by the events. The 2-step playbook's effect row is
   written to a database of its own, so its commit is the playbook's, not counted here.

Counts do not depend on the machine's speed or load; the ceiling does. One request at a
time gives the receiver's cost per event without group commit (concurrent claims share a
statement and a commit: the figure is an upper bound). A private cluster by default
(initdb/pg_ctl, PostgreSQL's default settings, ``pg_stat_statements`` loaded, as the other
benchmarks), or ``--pg-url`` for a local server of your own with ``pg_stat_statements``.

    .venv/bin/python -m bench.limits [--events 500] [--clients 1,2,4,8,16,32] [--seconds 10]

Prints a table, writes bench/results/limits.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg

from bench.common import load, procs
from bench.common.ceiling import Count, best_tps, limit_row, parse_tps, table
from inbox import Playbook, StepContext, register
from inbox.domain.sources import SourceOptions

SECRET = "bench-limits-secret"
TENANT = "bench"
DURABILITY = (
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_sync_method",
    "wal_level",
    "wal_buffers",
    "wal_writer_delay",
    "commit_delay",
    "commit_siblings",
)
PGBENCH_SCRIPT = "BEGIN;\nINSERT INTO probe (v) VALUES (1);\nCOMMIT;\n"

# The figures the inbox reaches today (events/s; the run's date), from bench/README.md; the
# 2-step one from the lockstep drain's own run (20,000 stored events, the Procfile's worker),
# not yet in that file.
TODAY: dict[str, tuple[float, str]] = {
    "ingest, unique key": (2466, "bench.ingest 2026-12-03 22:14, unique keys, median of 5"),
    "ingest, duplicate key": (2182, "bench.ingest 2026-12-03 22:14, storm, median of 5"),
    "drain, no effects": (7538, "bench.drain, 2026-11-30, 2 processes, no-op playbook"),
    "drain, 2 steps with an effect": (
        2542,
        "bench.drain_peers, 2026-12-03 22:21, 20,000 events, 2 processes, median of 3 rounds",
    ),
    "delivery, one callback": (3179, "bench.deliver, 2026-11-30, 2 couriers, instant sink, run 2"),
}

# -- what the counted drain runs -----------------------------------------------------------

EFFECTS_URL: dict[str, str] = {}  # the effects' database, set before the drain runs

noop = register(Playbook("limits-noop"), event_type="limits.noop")
two_step = register(Playbook("limits-two-step"), event_type="limits.two-step")
callback = register(Playbook("limits-callback"), event_type="limits.callback")


@noop.step("noop", effect=False)
def nothing(ctx: StepContext) -> dict[str, Any]:
    return {}


@two_step.step("check", effect=False)
def check(ctx: StepContext) -> dict[str, Any]:
    return {"checked": True}


_effects = threading.local()


@two_step.step("apply")
def apply(ctx: StepContext) -> dict[str, Any]:
    """The outside effect: a row keyed by the step key, written at most once."""
    conn = getattr(_effects, "conn", None)
    if conn is None:
        conn = _effects.conn = psycopg.connect(EFFECTS_URL["url"], autocommit=True)
    conn.execute(
        "INSERT INTO limits_effects (step_key) VALUES (%s) ON CONFLICT DO NOTHING", (ctx.step_key,)
    )
    return {"applied": True}


@callback.step("tell", effect=False)
def tell(ctx: StepContext) -> dict[str, Any]:
    ctx.send("limits.told", {"event": ctx.event.public_id})
    return {"told": True}


PLAYBOOKS = (noop, two_step, callback)


# -- the server ----------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.limits", description=__doc__)
    p.add_argument("--events", type=int, default=500, help="events counted per path")
    p.add_argument("--clients", default="1,2,4,8,16,32", help="pgbench client levels")
    p.add_argument("--seconds", type=float, default=10.0, help="per pgbench level")
    p.add_argument("--pg-url", default=os.environ.get("BENCH_PG_URL"), help="a local server")
    p.add_argument("--out", type=Path, default=procs.RESULTS / "limits.json")
    return p.parse_args(argv)


@contextlib.contextmanager
def server(pg_url: str | None) -> Iterator[str]:
    from dev.embedded import PrivatePostgres

    if pg_url is not None:
        yield pg_url
        return
    # autovacuum off: its ANALYZE would take transaction ids the counts read as the
    # inbox's; no durability setting is touched.
    preload = {"shared_preload_libraries": "pg_stat_statements", "autovacuum": "off"}
    cluster = PrivatePostgres(settings=preload)
    try:
        yield cluster.url
    finally:
        cluster.stop()


def durability(pg_url: str) -> dict[str, str]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        return {k: str(_scalar(conn, f"SHOW {k}")) for k in DURABILITY}


def _scalar(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def _url_of(pg_url: str, name: str) -> str:
    base, _, query = pg_url.partition("?")
    return base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")


# -- 1. the ceiling ------------------------------------------------------------------------


def ceiling(pg_url: str, clients: list[int], seconds: float) -> dict[str, Any]:
    if shutil.which("pgbench") is None:
        raise RuntimeError("pgbench is not installed (apt-get install postgresql-client)")
    name = "inbox_limits_pgbench"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _url_of(pg_url, name)
    levels: dict[int, float] = {}
    loads: dict[int, list[float]] = {}
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE probe (id bigserial PRIMARY KEY, v int NOT NULL)")
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
            f.write(PGBENCH_SCRIPT)
        try:
            for c in clients:
                threads = min(c, os.cpu_count() or 1)
                before = os.getloadavg()[0]
                cmd = ["pgbench", "-n", "-M", "prepared", "-f", f.name, "-c", str(c)]
                cmd += ["-j", str(threads), "-T", str(int(seconds)), url]
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
                if done.returncode != 0:
                    raise RuntimeError(f"pgbench failed: {done.stderr.strip()[-400:]}")
                levels[c] = parse_tps(done.stdout)
                loads[c] = [round(before, 2), round(os.getloadavg()[0], 2)]
                print(f"pgbench {c:3} clients: {levels[c]:9,.0f} commits/s (load {loads[c]})")
        finally:
            os.unlink(f.name)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    best_clients, best = best_tps(levels)
    return {
        "script": PGBENCH_SCRIPT,
        "tps_by_clients": levels,
        "loadavg_before_after_by_clients": loads,
        "best_clients": best_clients,
        "commits_per_s": best,
    }


# -- 2. the counts -------------------------------------------------------------------------


class Sink:
    """A local endpoint answering 200 at once, on a thread of this process."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/cb"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Counter:
    """What one database spent, read from the maintenance database: its transactions
    (``pg_stat_database.xact_commit``, read-only ones included), the server's transaction
    ids handed out (one per transaction that wrote, and so flushed the WAL at commit:
    the commits the ceiling is about) and its statements (``pg_stat_statements``)."""

    def __init__(self, pg_url: str, dbname: str) -> None:
        self.conn = psycopg.connect(pg_url, autocommit=True)
        self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.dbname = dbname

    def read(self) -> tuple[int, int, int]:
        self.conn.execute("SELECT pg_stat_clear_snapshot()")
        row = self.conn.execute(
            "SELECT d.xact_commit,"
            " pg_snapshot_xmax(pg_current_snapshot())::text::bigint,"
            " (SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s WHERE s.dbid = d.datid),"
            " (SELECT count(*) FROM pg_stat_activity a WHERE a.datid = d.datid)"
            " FROM pg_stat_database d WHERE d.datname = %s",
            (self.dbname,),
        ).fetchone()
        assert row is not None
        if row[3]:
            return (-1, -1, -1)  # a backend still open: its counts may not be flushed
        return int(row[0]), int(row[1]), int(row[2])

    def settled(self, timeout: float = 60.0) -> tuple[int, int, int]:
        """The counts once no backend of the database is left (a backend flushes its
        counts when it exits) and two reads agree."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            now = self.read()
            if now[0] >= 0 and now == last:
                return now
            last = now
            time.sleep(0.5)
        raise RuntimeError(f"the counts of {self.dbname} did not settle in {timeout:.0f} s")


class Paths:
    """The run's inbox database (tenant, one source per playbook, one endpoint at the
    sink) and the engines open on it; each path runs through the product's own code."""

    def __init__(self, url: str, sink: Sink, events: int) -> None:
        from inbox.domain.callbacks import new_secret
        from inbox.infra.config import Settings
        from inbox.store.write import endpoints as estore
        from inbox.store.write import sources as sstore

        self.events = events
        self.settings = Settings(database_url=url, retry_base_seconds=0.0)
        self.engines: list[Any] = []
        with self.fresh().begin() as conn:
            sstore.create_tenant(conn, TENANT)
            self.sources = {
                pb.name: sstore.create_source(
                    conn,
                    TENANT,
                    pb.name,
                    "hmac",
                    [SECRET],
                    SourceOptions.from_dict({"playbook": pb.name}),
                )
                for pb in PLAYBOOKS
            }
            made = estore.create_endpoint(conn, TENANT, sink.url, new_secret(), retry_schedule=[0])
            self.endpoint_id = made.id
        self.close()

    def fresh(self) -> Any:
        from inbox.store.db.engine import make_engine

        engine = make_engine(self.settings)
        self.engines.append(engine)
        return engine

    def close(self) -> None:
        """Every connection of the run's database closed (their backends then flush their
        counts), the effects' too."""
        from inbox.store.db import claim_connections

        while self.engines:
            engine = self.engines.pop()
            claim_connections.for_engine(engine).close()  # the receiver's own connections
            engine.dispose()
        _effects_close()

    def _post(self, web: Any, pb: Playbook, key: str) -> bool:
        body = json.dumps({"type": pb.name, "key": key}).encode()
        headers = load.signed(SECRET, body, key)
        answer = web.post(self.sources[pb.name].path, data=body, headers=headers)
        if answer.status_code != 202:
            raise RuntimeError(f"{pb.name} {key}: {answer.status_code} {answer.data!r}")
        return bool(answer.headers.get("Idempotent-Replayed") == "true")

    def ingest(self, pb: Playbook, replays: int) -> int:
        """``events`` signed requests to ``pb``'s source, one at a time, keys ``0..n``;
        ``replays`` of them must be answered as duplicates."""
        from web.app import create_app

        engine = self.fresh()
        app = create_app(
            self.settings, engine=engine, doorbell=lambda: None, route_cache_seconds=3600
        )
        web = app.test_client()
        seen = sum(self._post(web, pb, f"{pb.name}-{i}") for i in range(self.events))
        if seen != replays:
            raise RuntimeError(f"{pb.name}: {seen} replays, expected {replays}")
        return self.events

    def drain(self) -> int:
        from inbox.services.drain import drain_once
        from inbox.services.runtime import Runtime

        engine, done = self.fresh(), 0
        while (claimed := drain_once(Runtime(self.settings, engine)).claimed) > 0:
            done += claimed
        if done != self.events:
            raise RuntimeError(f"drained {done} events, expected {self.events}")
        return done

    def deliver(self) -> int:
        from inbox.services.courier import deliver_once

        engine, done, rounds = self.fresh(), 0, 0
        while done < self.events and rounds < 10 * self.events:
            done += deliver_once(engine, self.endpoint_id, allow_private=True).delivered
            rounds += 1
        if done != self.events:
            raise RuntimeError(f"delivered {done} callbacks, expected {self.events}")
        return done


def count_paths(pg_url: str, events: int) -> dict[str, Count]:
    """Each path's counts for ``events`` events, in order: ingest (unique keys, then the
    same keys again), the no-op drain, the 2-step drain, the drain of a step that sends
    one callback, and the delivery of those callbacks. Each path starts with no
    connection open, so a fresh engine's first statements are counted with it."""
    name, url = procs.create_database(pg_url, "inbox_limits")
    effects_name, effects_url = procs.create_database(pg_url, "inbox_limits_effects")
    EFFECTS_URL["url"] = effects_url
    with psycopg.connect(effects_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE limits_effects (step_key text PRIMARY KEY)")
    sink = Sink()
    counter = Counter(pg_url, name)
    counts: dict[str, Count] = {}
    paths: Paths | None = None

    def counted(path: str, run: Callable[[], int], other_writes: int = 0) -> None:
        assert paths is not None
        before = counter.settled()
        n = run()
        paths.close()
        after = counter.settled()
        writes = after[1] - before[1] - other_writes
        counts[path] = c = Count(after[0] - before[0], writes, after[2] - before[2], n)
        print(
            f"{path:32} {c.commits_per_event:6.3f} writing commits"
            f" {c.transactions_per_event:6.3f} transactions {c.trips_per_event:6.3f} round trips"
        )

    try:
        paths = Paths(url, sink, events)
        counted("ingest, unique key", lambda: paths.ingest(noop, 0))
        counted("ingest, duplicate key", lambda: paths.ingest(noop, events))
        counted("drain, no effects", paths.drain)
        paths.ingest(two_step, 0)
        paths.close()
        # the effect rows' own commits (one per event, in their own database) are the
        # playbook's, not the inbox's
        counted("drain, 2 steps with an effect", paths.drain, other_writes=events)
        paths.ingest(callback, 0)
        paths.close()
        counted("drain, a step sending a callback", paths.drain)
        counted("delivery, one callback", paths.deliver)
    finally:
        if paths is not None:
            paths.close()
        sink.close()
        counter.conn.close()
        procs.drop_database(pg_url, name)
        procs.drop_database(pg_url, effects_name)
    return counts


def _effects_close() -> None:
    conn = getattr(_effects, "conn", None)
    if conn is not None:
        conn.close()
        _effects.conn = None


# -- the run -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    procs.RESULTS.mkdir(parents=True, exist_ok=True)
    procs.use_own_kek()
    clients = [int(c) for c in args.clients.split(",") if c]
    with server(args.pg_url) as pg_url:
        settings = durability(pg_url)
        print("durability:", ", ".join(f"{k}={v}" for k, v in settings.items()))
        counts = count_paths(pg_url, args.events)
        found = ceiling(pg_url, clients, args.seconds)
    rows = [
        limit_row(path, c, found["commits_per_s"], TODAY.get(path, (None, ""))[0])
        for path, c in counts.items()
    ]
    print(table(rows))
    procs.write_report(
        args.out,
        {
            "events_per_path": args.events,
            "durability": settings,
            "pgbench": found,
            "today_from": {k: v[1] for k, v in TODAY.items()},
            "paths": rows,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
