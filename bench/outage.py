"""Endpoint outage benchmark: what a 45 s outage costs, and how fast the backlog recovers.

A fresh PostgreSQL database and a redis-server of the run's own; two courier processes
(``--pool threads --concurrency 8``, as the Procfile's courier), a worker and beat, with the default
settings (circuit: 3 failures, probes 1 s doubling to 5 s, jittered; sweep every 30 s). The
endpoint has the table's defaults (4 attempts, retries after 5, 30, 120 s, 4 in flight). A
sink in its own process answers 503 until it is told to answer 200, and counts every attempt
and every 2xx per webhook-id.

For each backlog size (100 and 10,000 by default): the deliveries are inserted, the endpoint
is rung, the sink answers 503 for ``--outage`` seconds, then 200. Measured: attempts during
the outage, attempts per message over the whole run, the seconds from the sink's switch to
its last first-2xx (the recovery), webhook-ids answered 2xx more than once, dead letters.

    .venv/bin/python -m bench.outage [--outage 45] [--sizes 100,10000]

Prints a table, writes bench/results/outage.json. Target (issue #40): the last of 100
waiting delivered within 10 s of the endpoint answering 2xx, each once. Exits non-zero only
on a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import subprocess
import sys
import time
import traceback
import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
from celery import Celery
from sqlalchemy import create_engine

from bench.common import procs
from inbox.domain import callbacks
from inbox.store.db.engine import sqlalchemy_url
from inbox.store.write import endpoints as estore
from inbox.store.write import sources as sstore

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
TENANT = "bench"

_INSERT = """
INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_type, body, state)
SELECT 'msg_' || %(tag)s || '_' || g, %(t)s, %(e)s, 'bench.outage',
       convert_to(json_build_object('id', 'msg_' || %(tag)s || '_' || g,
           'type', 'bench.outage', 'tenant', 'bench', 'data', json_build_object('n', g)
       )::text, 'UTF8'), 'pending'
  FROM generate_series(1, %(n)s) g
"""


def _sink_call(port: int, method: str, path: str) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=b"")
        return dict(json.loads(conn.getresponse().read()))
    finally:
        conn.close()


def _counts(url: str, endpoint_id: int) -> tuple[int, int, int, str]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE d.state = 'delivered'),"
            " count(*) FILTER (WHERE d.state IN ('pending', 'sending')),"
            " count(*) FILTER (WHERE d.state = 'failed'), min(e.circuit)"
            " FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id"
            " WHERE d.endpoint_id = %s",
            (endpoint_id,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2]), str(row[3])


def one_size(
    url: str, tenant_id: int, port: int, app: Celery, n: int, outage: float, cap: float
) -> dict[str, Any]:
    engine = create_engine(sqlalchemy_url(url))
    with engine.begin() as conn:
        ep = estore.create_endpoint(
            conn, TENANT, f"http://127.0.0.1:{port}/ep{n}", callbacks.new_secret()
        )
    engine.dispose()
    _sink_call(port, "POST", "/_reset")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_INSERT, {"tag": uuid.uuid4().hex[:8], "t": tenant_id, "e": ep.id, "n": n})
    for _ in range(ep.max_in_flight):
        app.send_task("inbox.deliver", args=[ep.id], queue="deliveries")
    time.sleep(outage)  # the outage: the sink answers 503
    down = _sink_call(port, "GET", "/_stats")
    circuit = _counts(url, ep.id)[3]
    up_at = float(_sink_call(port, "POST", "/_up")["at"])
    t0 = time.monotonic()
    while time.monotonic() - t0 < cap:
        delivered, left, failed, _ = _counts(url, ep.id)
        if left == 0:
            break
        time.sleep(0.1)
    stats = _sink_call(port, "GET", "/_stats")
    delivered, left, failed, closed = _counts(url, ep.id)
    attempts = stats["down"] + stats["up"]
    return {
        "n": n,
        "outage_s": outage,
        "attempts_during_outage": down["down"],
        "circuit_during_outage": circuit,
        "attempts_total": attempts,
        "attempts_per_message": round(attempts / n, 3),
        "recovery_s": round(stats["last_ok"] - up_at, 2) if stats["last_ok"] else None,
        "delivered": delivered,
        "left": left,
        "dead_letters": failed,
        "distinct_2xx": stats["ok"],
        "doubled_2xx": stats["dups"],
        "circuit_after": closed,
        "load_avg_1m": os.getloadavg()[0],
    }


def table(out: dict[str, Any]) -> str:
    head = (
        "waiting",
        "attempts in outage",
        "attempts/msg",
        "recovery s",
        "delivered",
        "2xx twice",
        "dead",
    )
    rows = [head]
    for r in out.get("runs", []):
        rows.append(
            (
                str(r["n"]),
                str(r["attempts_during_outage"]),
                str(r["attempts_per_message"]),
                str(r["recovery_s"]),
                str(r["delivered"]),
                str(r["doubled_2xx"]),
                str(r["dead_letters"]),
            )
        )
    return "\n".join("  ".join(f"{c:>18}" for c in row) for row in rows)


def main() -> int:
    procs.use_own_kek()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outage", type=float, default=45.0, help="seconds of 503")
    parser.add_argument("--sizes", default="100,10000", help="waiting deliveries per run")
    parser.add_argument("--cap", type=float, default=180.0, help="seconds to recover, at most")
    args = parser.parse_args()
    out: dict[str, Any] = {"started": datetime.now(UTC).isoformat(), "runs": []}
    name = ""
    running: list[procs.Proc] = []
    sink: subprocess.Popen[bytes] | None = None
    broker: procs.PrivateRedis | None = None
    rc = 0
    try:
        name, url = procs.create_database(SERVER, "inbox_bench_outage")
        broker = procs.PrivateRedis("outage-redis")
        sink = subprocess.Popen(
            [sys.executable, "-m", "bench.outage", "sink"], cwd=procs.ROOT, stdout=subprocess.PIPE
        )
        assert sink.stdout is not None
        port = int(sink.stdout.readline())
        app = Celery("bench_outage", broker=broker.url)
        engine = create_engine(sqlalchemy_url(url))
        with engine.begin() as conn:
            tenant_id = sstore.create_tenant(conn, TENANT).id
        engine.dispose()
        env = {"DATABASE_URL": url, "REDIS_URL": broker.url, "INBOX_ALLOW_PRIVATE_TARGETS": "1"}
        threads = ("--pool", "threads", "--loglevel", "INFO")
        running = [
            procs.celery_worker("workers.app", "deliveries", 8, env, f"courier-{i}", *threads)
            for i in range(2)
        ]
        # A worker runs the beat's sweep (which rings couriers that nothing rang).
        running.append(procs.celery_worker("workers.app", "inbox", 2, env, "outage-worker"))
        for p in running:
            procs.wait_celery(app, p)
        running.append(procs.celery_beat("workers.app", env, "outage-beat"))
        for n in (int(s) for s in args.sizes.split(",")):
            run = one_size(url, tenant_id, port, app, n, args.outage, args.cap)
            out["runs"].append(run)
            print(run, flush=True)
    except Exception:
        traceback.print_exc()
        out["error"] = traceback.format_exc()
        rc = 1
    finally:
        procs.tear_down(running, sink, broker, SERVER, name)
    procs.RESULTS.mkdir(exist_ok=True)
    (procs.RESULTS / "outage.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(table(out))
    print(f"wrote {procs.RESULTS / 'outage.json'}")
    return rc


# -- the sink, its own process -------------------------------------------------------------
#
# HTTP/1.1 with keep-alive on 127.0.0.1: every POST is an attempt, answered 503 while down
# and 200 once up; each webhook-id answered 200 is counted once, a second 200 as doubled.
# POST /_up switches (and returns when, time.time()), POST /_reset starts over, GET /_stats.

STATE: dict[str, Any] = {}


def _reset() -> None:
    STATE.update(up=False, down=0, upn=0, ok=set(), dups=0, last_ok=0.0)


def _response(status: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            _, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0") or 0)
            if length:
                await reader.readexactly(length)
            if path == "/_stats":
                body = {
                    "down": STATE["down"],
                    "up": STATE["upn"],
                    "ok": len(STATE["ok"]),
                    "dups": STATE["dups"],
                    "last_ok": STATE["last_ok"],
                }
                writer.write(_response("200 OK", json.dumps(body).encode()))
            elif path == "/_up":
                STATE["up"] = True
                writer.write(_response("200 OK", json.dumps({"at": time.time()}).encode()))
            elif path == "/_reset":
                _reset()
                writer.write(_response("200 OK", b"{}"))
            elif not STATE["up"]:
                STATE["down"] += 1
                writer.write(_response("503 Service Unavailable", b'{"down":true}'))
            else:
                STATE["upn"] += 1
                msg = headers.get("webhook-id", "")
                if msg in STATE["ok"]:
                    STATE["dups"] += 1
                else:
                    STATE["ok"].add(msg)
                    STATE["last_ok"] = time.time()
                writer.write(_response("200 OK", b'{"ok":true}'))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def sink() -> None:
    _reset()
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
