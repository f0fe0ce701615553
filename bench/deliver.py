"""Outbound delivery benchmark: how fast the couriers empty an endpoint's outbox.

A fresh PostgreSQL database (created, migrated, dropped) and a redis-server of the run's own
as the broker, all on 127.0.0.1. Two courier processes (``celery -A workers.app worker -Q
deliveries --pool threads --concurrency 8``) deliver to a local sink run in its own process
(``python -m bench.deliver sink``, below). Pending deliveries are inserted with SQL, then
the endpoint is rung with max_in_flight ``inbox.deliver`` messages; the rate is deliveries
/ (last ``finished_at`` - the ring), read from the database.

1. instant sink (200 at once), endpoint max_in_flight 8;
2. the sink answering after 50 ms;
3. the instant sink on endpoint A while endpoint B (same tenant, max_in_flight 8,
   timeout 1 s) accepts connections and never answers; B is rung again every second;
   A's rate against phase 1.

    .venv/bin/python -m bench.deliver

Prints a table, writes bench/results/deliver.json. Targets: >= 1,000 deliveries/s to the
instant sink; the dead endpoint costs A <= 10 %. Exits non-zero only on a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import psycopg
from celery import Celery
from sqlalchemy import Engine, create_engine

from bench.common import procs
from inbox.domain import callbacks
from inbox.store.db.engine import sqlalchemy_url
from inbox.store.write import endpoints as estore
from inbox.store.write import sources as sstore

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
TENANT = "bench"
MAX_IN_FLIGHT = 8

_INSERT = """
INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_type, body, state)
SELECT 'msg_' || %(tag)s || '_' || g, %(t)s, %(e)s, 'bench.deliver',
       convert_to(json_build_object(
           'id', 'msg_' || %(tag)s || '_' || g, 'type', 'bench.deliver', 'tenant', 'bench',
           'created_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
           'data', json_build_object('account', 'acct-' || g, 'pad', repeat('x', 380))
       )::text, 'UTF8'), 'pending'
  FROM generate_series(1, %(n)s) g
"""


class Bench:
    def __init__(self, url: str, sink_port: int, app: Celery) -> None:
        self.url = url
        self.sink = f"http://127.0.0.1:{sink_port}"
        self.sink_port = sink_port
        self.app = app
        self.engine: Engine = create_engine(sqlalchemy_url(url))
        with self.engine.begin() as conn:
            self.tenant_id = sstore.create_tenant(conn, TENANT).id

    def endpoint(self, path: str, **opts: Any) -> int:
        opts.setdefault("max_in_flight", MAX_IN_FLIGHT)
        opts.setdefault("retry_schedule", [0])
        opts.setdefault("max_attempts", 1000)
        with self.engine.begin() as conn:
            ep = estore.create_endpoint(
                conn, TENANT, f"{self.sink}{path}", callbacks.new_secret(), **opts
            )
        return ep.id

    def insert(self, endpoint_id: int, n: int) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                _INSERT,
                {"tag": uuid.uuid4().hex[:8], "t": self.tenant_id, "e": endpoint_id, "n": n},
            )

    def ring(self, endpoint_id: int, times: int = MAX_IN_FLIGHT) -> None:
        for _ in range(times):
            self.app.send_task("inbox.deliver", args=[endpoint_id], queue="deliveries")

    def counts(self, endpoint_id: int) -> dict[str, Any]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE state = 'delivered'),"
                " count(*) FILTER (WHERE state IN ('pending', 'sending')),"
                " max(finished_at), now(), count(DISTINCT lease_owner) FILTER"
                " (WHERE state = 'sending') FROM deliveries WHERE endpoint_id = %s",
                (endpoint_id,),
            ).fetchone()
        assert row is not None
        return {"delivered": row[0], "left": row[1], "last": row[2], "now": row[3], "busy": row[4]}

    def sink_stats(self) -> dict[str, int]:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.sink_port, timeout=5)
        try:
            conn.request("GET", "/stats")
            return dict(json.loads(conn.getresponse().read()))
        finally:
            conn.close()

    def run(self, endpoint_id: int, n: int, cap: float) -> dict[str, Any]:
        """Ring, wait until all delivered (or ``cap`` seconds), return the rate."""
        self.insert(endpoint_id, n)
        start = self.counts(endpoint_id)["now"]
        t0 = time.monotonic()
        self.ring(endpoint_id)
        last_progress, last_delivered = t0, 0
        busy: list[int] = []
        while True:
            time.sleep(0.1)
            c = self.counts(endpoint_id)
            busy.append(c["busy"])
            if c["left"] == 0 or time.monotonic() - t0 > cap:
                break
            if c["delivered"] != last_delivered:
                last_progress, last_delivered = time.monotonic(), c["delivered"]
            elif time.monotonic() - last_progress > 2.0:
                self.ring(endpoint_id)  # a stalled chain of re-rings (should not happen)
                last_progress = time.monotonic()
        done = c["left"] == 0
        end = c["last"] if done else c["now"]
        secs = (end - start).total_seconds()
        return {
            "n": n,
            "delivered": c["delivered"],
            "complete": done,
            "seconds": round(secs, 3),
            "per_s": round(c["delivered"] / secs, 1) if secs > 0 else None,
            "mean_busy_slots": round(sum(busy) / len(busy), 2) if busy else None,
            "load_avg_1m": os.getloadavg()[0],
        }


def _ringer(bench: Bench, endpoint_id: int, stop: threading.Event) -> None:
    while not stop.is_set():
        bench.ring(endpoint_id)
        stop.wait(1.0)


def phases(bench: Bench, args: argparse.Namespace, out: dict[str, Any]) -> None:
    warm = bench.endpoint("/fast/warm")
    bench.run(warm, 500, 20)

    a1 = bench.endpoint("/fast/p1")
    out["instant"] = bench.run(a1, args.n, args.cap)
    print(f"instant: {out['instant']}", flush=True)

    slow = bench.endpoint("/slow/p2")
    out["slow_50ms"] = bench.run(slow, args.n_slow, args.cap)
    print(f"slow 50 ms: {out['slow_50ms']}", flush=True)

    dead = bench.endpoint("/dead/p3", timeout_ms=1000)
    bench.insert(dead, 2000)
    before = bench.sink_stats().get("dead", 0)
    stop = threading.Event()
    ringer = threading.Thread(target=_ringer, args=(bench, dead, stop), daemon=True)
    ringer.start()
    time.sleep(1.5)  # B's couriers are already hanging when A's deliveries arrive
    a3 = bench.endpoint("/fast/p3")
    try:
        out["instant_with_dead"] = bench.run(a3, args.n, args.cap)
    finally:
        stop.set()
        ringer.join()
    out["instant_with_dead"]["dead_attempts"] = bench.sink_stats().get("dead", 0) - before
    print(f"instant with dead B: {out['instant_with_dead']}", flush=True)
    r1, r3 = out["instant"]["per_s"], out["instant_with_dead"]["per_s"]
    out["dead_ratio"] = round(r3 / r1, 3) if r1 and r3 else None


def table(out: dict[str, Any]) -> str:
    rows = [("phase", "n", "delivered", "seconds", "deliveries/s")]
    for key in ("instant", "slow_50ms", "instant_with_dead"):
        r = out.get(key)
        if r:
            rows.append((key, str(r["n"]), str(r["delivered"]), str(r["seconds"]), str(r["per_s"])))
    lines = ["  ".join(f"{c:>18}" for c in row) for row in rows]
    rate = (out.get("instant") or {}).get("per_s")
    lines.append(f"target >= 1000/s to the instant sink: {rate} -> {bool(rate and rate >= 1000)}")
    ratio = out.get("dead_ratio")
    lines.append(f"A with dead B / A alone: {ratio} -> {bool(ratio and ratio >= 0.9)}")
    return "\n".join(lines)


def main() -> int:
    procs.use_own_kek()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10000, help="deliveries to the instant sink")
    parser.add_argument("--n-slow", type=int, default=1500, help="deliveries to the 50 ms sink")
    parser.add_argument("--cap", type=float, default=12.0, help="seconds per phase, at most")
    args = parser.parse_args()
    out: dict[str, Any] = {"started": datetime.now(UTC).isoformat(), "couriers": "2 x threads 8"}
    name = ""
    couriers: list[procs.Proc] = []
    sink: subprocess.Popen[bytes] | None = None
    rc = 0
    broker: procs.PrivateRedis | None = None
    try:
        name, url = procs.create_database(SERVER, "inbox_bench_deliver")
        broker = procs.PrivateRedis("deliver-redis")
        sink = subprocess.Popen(
            [sys.executable, "-m", "bench.deliver", "sink"], cwd=procs.ROOT, stdout=subprocess.PIPE
        )
        assert sink.stdout is not None
        port = int(sink.stdout.readline())
        app = Celery("bench_deliver", broker=broker.url)
        bench = Bench(url, port, app)
        env = {"DATABASE_URL": url, "REDIS_URL": broker.url, "INBOX_ALLOW_PRIVATE_TARGETS": "1"}
        courier = ("workers.app", "deliveries", 8, env)
        threads = ("--pool", "threads", "--loglevel", "INFO")  # as the Procfile's courier
        couriers = [procs.celery_worker(*courier, f"courier-{i}", *threads) for i in range(2)]
        for p in couriers:
            procs.wait_celery(app, p)
        phases(bench, args, out)
        out["sink_counts"] = bench.sink_stats()
        bench.engine.dispose()
    except Exception:
        traceback.print_exc()
        out["error"] = traceback.format_exc()
        rc = 1
    finally:
        procs.tear_down(couriers, sink, broker, SERVER, name)
    procs.RESULTS.mkdir(exist_ok=True)
    (procs.RESULTS / "deliver.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(table(out))
    print(f"wrote {procs.RESULTS / 'deliver.json'}")
    return rc


# -- the sink, its own process (its CPU is not the courier's) -----------------------------
#
# An asyncio HTTP/1.1 server with keep-alive on 127.0.0.1. The path picks the behaviour:
# /fast/... answers 200 at once, /slow/... after SLOW_SECONDS, /dead/... accepts the request
# and never answers. GET /stats returns the POST count per first path segment. It prints
# its port on the first line of stdout.

OK = b'{"ok":true}'
SLOW_SECONDS = 0.05
COUNTS: Counter[str] = Counter()


def _response(status: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if length:
                await reader.readexactly(length)
            if method == "GET" and path == "/stats":
                writer.write(_response("200 OK", json.dumps(dict(COUNTS)).encode()))
                await writer.drain()
                continue
            kind = path.strip("/").split("/", 1)[0]
            COUNTS[kind] += 1
            if kind == "dead":
                await reader.read()  # hold the connection until the client gives up
                return
            if kind == "slow":
                await asyncio.sleep(SLOW_SECONDS)
            writer.write(_response("200 OK", OK))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def sink() -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0, backlog=1024)
    sys.stdout.write(f"{server.sockets[0].getsockname()[1]}\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if sys.argv[1:] == ["sink"]:
        try:
            asyncio.run(sink())
        except KeyboardInterrupt:
            pass
        sys.exit(0)
    os.chdir(procs.ROOT)
    sys.exit(main())
