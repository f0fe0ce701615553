"""Ordered lanes benchmark: how late the next event of a business key runs, and what
ordering costs the drain.

1. latency (issue #41's load): --entities entities x --per-entity events, each entity's
   events sent strictly in order (each POST after the previous one's 202), the entities
   starting --stagger s apart; every event's one step sleeps 5-60 ms (seeded) and writes a
   row as it starts and one as it ends (``bench_lane_effects``). The web server, one worker
   of --concurrency processes and beat with the default sweep (30 s). Run without the
   source's ``serialize_by_business_key`` and with it. From the effects: overlapping pairs
   (the next event of an entity started before the previous ended), out-of-order pairs
   (started before the previous started); receipt->completed p50/p99; the wake gap (a
   lane's next event's start minus the later of its receipt and its predecessor's end);
   the excess over the lane's own steps (completion minus the earliest it could complete:
   the later of its receipt and its predecessor's ideal completion, plus its own step).
2. drain: --events pending events of a no-op playbook (as the receiver stores them) over
   K keys (--keys), ordered (a lane per key) and not, drained by one worker of
   --concurrency processes from one doorbell to the last ``finished_at``; ordered/unordered.
3. fairness: a quiet tenant's (and a cold key's) receipt->completed p99 over --quiet events
   sent 0.2 s apart, first with nothing else pending (unloaded), then while another tenant
   (or one hot key of the same ordered source) has --fair-backlog pending events (5,000 by
   default; the issue's figure is --fair-backlog 50000, for the integrator). The bar:
   loaded p99 <= 2 x unloaded p99 + 1 s.

Prints tables and writes bench/results/lanes.json. Workers load this module
(``INBOX_PLAYBOOKS=bench.lanes``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import redis
from celery import Celery
from sqlalchemy import create_engine

from bench.common import cpu, load, procs
from inbox import Playbook, StepContext, register
from inbox.domain.lanes import PARKED_UNTIL
from inbox.domain.sources import SourceOptions
from inbox.store.db.engine import sqlalchemy_url
from inbox.store.write import sources as store

TENANT, SECRET, QUIET = "bench", "bench-lanes-secret", "bench-quiet"
LANE_TYPE, NOOP_TYPE = "bench.lane", "bench.lane.noop"
EFFECTS = """CREATE TABLE IF NOT EXISTS bench_lane_effects (
    id bigserial PRIMARY KEY, event text NOT NULL, what text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp())"""

# -- what the workers load ---------------------------------------------------------------

lane = register(Playbook("bench-lane"), event_type=LANE_TYPE)
_conn = threading.local()


def _effect(event: str, what: str) -> None:
    conn = getattr(_conn, "c", None)
    if conn is None:
        conn = _conn.c = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)
    conn.execute("INSERT INTO bench_lane_effects (event, what) VALUES (%s, %s)", (event, what))


@lane.step("work")
def work(ctx: StepContext) -> dict[str, Any]:
    _effect(ctx.event.public_id, "start")
    time.sleep(float(ctx.payload["ms"]) / 1000)
    _effect(ctx.event.public_id, "end")
    return {"seq": ctx.payload["seq"]}


noop = register(Playbook("bench-lane-noop"), event_type=NOOP_TYPE)


@noop.step("noop", effect=False)
def nothing(ctx: StepContext) -> dict[str, Any]:
    return {}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = p.add_argument
    add("--entities", type=int, default=20)
    add("--per-entity", type=int, default=10)
    add("--stagger", type=float, default=0.5, help="seconds between the entities' starts")
    add("--concurrency", type=int, default=2, help="worker processes")
    add("--sweep-seconds", type=int, default=30, help="beat's sweep (the default: 30)")
    add("--events", type=int, default=20_000, help="drain: pending events")
    add("--keys", default="10,1000,100000", help="drain: business keys (lanes)")
    add("--unparked", action="store_true", help="drain: store ordered events due, not parked")
    add("--fair-backlog", type=int, default=5_000, help="fairness: the hot side's backlog")
    add("--quiet", type=int, default=20, help="fairness: the quiet side's events")
    add("--skip", default="", help="comma-separated phases to skip: latency,drain,fairness")
    add("--seed", type=int, default=41)
    server = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    add("--pg-url", default=server, help="a maintenance database on the server to use")
    add("--out", default=str(procs.RESULTS / "lanes.json"))
    return p.parse_args(argv)


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dbname, self.url = procs.create_database(args.pg_url, "inbox_bench_lanes")
        self.redis = procs.PrivateRedis("lanes-redis")
        self.ctl = Celery("bench_ctl", broker=self.redis.url)
        self.started: list[procs.Proc] = []
        engine = create_engine(sqlalchemy_url(self.url))
        with engine.begin() as conn:
            store.create_tenant(conn, TENANT)
            self.sources = {}
            configs: dict[str, dict[str, Any]] = {
                "unordered": {"playbook": lane.name, "business_key_paths": ["entity"]},
                "ordered": {
                    "playbook": lane.name,
                    "business_key_paths": ["entity"],
                    "serialize_by_business_key": True,
                },
                "noop": {"playbook": noop.name},
            }
            store.create_tenant(conn, QUIET)
            quiet_opts = SourceOptions.from_dict({"playbook": lane.name})
            self.quiet = store.create_source(conn, QUIET, "quiet", "hmac", [SECRET], quiet_opts)
            for name, options in configs.items():
                opts = SourceOptions.from_dict(options)
                self.sources[name] = store.create_source(conn, TENANT, name, "hmac", [SECRET], opts)
        engine.dispose()
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(EFFECTS)

    def env(self, **extra: str) -> dict[str, str]:
        env = {"DATABASE_URL": self.url, "REDIS_URL": self.redis.url, "BROKER_URL": ""}
        env |= {"INBOX_PLAYBOOKS": "bench.lanes", "PYTHONPATH": str(procs.ROOT)}
        return env | extra

    def start(self, proc: procs.Proc) -> procs.Proc:
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        while self.started:
            self.started.pop().stop()

    def close(self) -> None:
        self.stop_all()
        self.redis.stop()


# -- 1. latency ----------------------------------------------------------------------------


def _post(port: int, path: str, payload: dict[str, Any], key: str) -> str:
    body = json.dumps(payload, separators=(",", ":")).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, headers=load.signed(SECRET, body, key)
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 202, resp.status
        answer: dict[str, Any] = json.loads(resp.read())
    return str(answer["id"])


def _send_all(r: Run, port: int, name: str) -> dict[str, tuple[int, int, float]]:
    """Every entity's events, in order; public id -> (entity, seq, step ms)."""
    a, src = r.args, r.sources[name]
    rng = random.Random(a.seed)
    plan = [[rng.uniform(5, 60) for _ in range(a.per_entity)] for _ in range(a.entities)]
    sent: dict[str, tuple[int, int, float]] = {}
    lock = threading.Lock()

    def entity(i: int) -> None:
        time.sleep(i * a.stagger)
        for k, ms in enumerate(plan[i]):
            payload = {"type": LANE_TYPE, "entity": f"e{i}", "seq": k, "ms": ms}
            public_id = _post(port, src.path, payload, f"{name}-e{i}-{k}")
            with lock:
                sent[public_id] = (i, k, ms)

    threads = [threading.Thread(target=entity, args=(i,)) for i in range(a.entities)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sent


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _latency_phase(r: Run, name: str, port: int) -> dict[str, Any]:
    sent = _send_all(r, port, name)
    n = len(sent)
    with psycopg.connect(r.url, autocommit=True) as conn:

        def done() -> int:
            row = conn.execute(
                "SELECT count(*) FROM events WHERE source_id = %s AND state = 'completed'",
                (r.sources[name].id,),
            ).fetchone()
            return int(row[0]) if row else 0

        procs.wait_progress(done, n, name)
        rows = conn.execute(
            "SELECT public_id, extract(epoch FROM received_at), extract(epoch FROM finished_at)"
            " FROM events WHERE source_id = %s",
            (r.sources[name].id,),
        ).fetchall()
        effects = conn.execute(
            "SELECT event, what, extract(epoch FROM at) FROM bench_lane_effects ORDER BY id"
        ).fetchall()
    received = {p: float(a) for p, a, _ in rows}
    finished = {p: float(b) for p, _, b in rows}
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    for event, what, at in effects:
        if event in sent:
            (start if what == "start" else end).setdefault(event, float(at))
    by_entity: dict[int, list[str]] = {}
    for public_id, (i, _k, _) in sorted(sent.items(), key=lambda x: x[1][:2]):
        by_entity.setdefault(i, []).append(public_id)
    overlaps = out_of_order = 0
    gaps: list[float] = []
    excess: list[float] = []
    for chain in by_entity.values():
        ideal = 0.0
        for k, p in enumerate(chain):
            ideal = max(received[p], ideal) + sent[p][2] / 1000
            excess.append(finished[p] - ideal)
            if k == 0:
                continue
            prev = chain[k - 1]
            overlaps += start[p] < end[prev]
            out_of_order += start[p] < start[prev]
            gaps.append(start[p] - max(received[p], end[prev]))
    latency = [finished[p] - received[p] for p in sent]
    pairs = sum(len(c) - 1 for c in by_entity.values())
    return {
        "source": name,
        "events": n,
        "pairs": pairs,
        "overlaps": overlaps,
        "out_of_order": out_of_order,
        "latency_p50_s": round(_pct(latency, 0.5), 3),
        "latency_p99_s": round(_pct(latency, 0.99), 3),
        "latency_max_s": round(max(latency), 3),
        "wake_gap_p50_ms": round(_pct(gaps, 0.5) * 1000, 1),
        "wake_gap_p99_ms": round(_pct(gaps, 0.99) * 1000, 1),
        "excess_p99_s": round(_pct(excess, 0.99), 3),
        "steps_mean_ms": round(statistics.mean(s[2] for s in sent.values()), 1),
    }


def run_latency(r: Run) -> list[dict[str, Any]]:
    a = r.args
    env = r.env(INBOX_SWEEP_SECONDS=str(a.sweep_seconds))
    worker = r.start(procs.celery_worker("workers.app", "inbox", a.concurrency, env, "lanes-w"))
    r.start(procs.celery_beat("workers.app", env, "lanes-beat"))
    web, port = procs.web("web.wsgi:app", {**env, "INBOX_DB_POOL_SIZE": "8"}, 2, 8, "lanes-web")
    r.start(web)
    procs.wait_http(web, port)
    procs.wait_celery(r.ctl, worker)
    out = []
    for name in ("unordered", "ordered"):
        cpu.wait_quiet(30)
        result = _latency_phase(r, name, port)
        print(json.dumps(result), flush=True)
        out.append(result)
    r.stop_all()
    return out


# -- 2. drain ------------------------------------------------------------------------------

# As the receiver stores them: ordered, every event but its key's first arrives behind an
# unfinished one, so it is parked (``inbox.domain.lanes.PARKED_UNTIL``) until that one ends.
_PENDING = """
    INSERT INTO events (public_id, tenant_id, source_id, event_type, business_key_digest,
                        ordering_key, content_type, body, body_sha256, response_status,
                        response_body, available_at)
    SELECT %(prefix)s || g, %(t)s, %(s)s, %(type)s, d, CASE WHEN %(ordered_key)s THEN d END,
           'application/json', convert_to(%(body)s, 'UTF8'), '\\x00', 202, '',
           CASE WHEN %(ordered)s AND g > %(keys)s THEN CAST(%(parked)s AS timestamptz)
                ELSE now() END
      FROM generate_series(1, %(n)s) g,
           LATERAL (SELECT sha256(convert_to('k' || (g %% %(keys)s), 'UTF8')) AS d) k
"""


def _drain(r: Run, keys: int, ordered: bool) -> dict[str, Any]:
    a, src = r.args, r.sources["noop"]
    redis.Redis.from_url(r.redis.url).flushdb()
    with psycopg.connect(r.url, autocommit=True) as conn:
        conn.execute("TRUNCATE events CASCADE")
        conn.execute("TRUNCATE lane_blocks")
        # The worker first, idle on an empty inbox (a starting worker drains at once), then
        # the pending events in one transaction, then one doorbell.
        worker = r.start(
            procs.celery_worker("workers.app", "inbox", a.concurrency, r.env(), f"drain-{keys}")
        )
        procs.wait_celery(r.ctl, worker)
        params = {"prefix": f"evt_{keys}_{int(ordered)}_", "t": src.tenant_id, "s": src.id}
        params |= {"type": NOOP_TYPE, "body": json.dumps({"type": NOOP_TYPE})}
        params |= {"n": a.events, "keys": keys, "ordered": ordered and not a.unparked}
        params |= {"ordered_key": ordered, "parked": PARKED_UNTIL}
        conn.execute(_PENDING, params)
        conn.execute("ANALYZE events")
        cpu.wait_quiet(30)
        t0 = time.time()
        r.ctl.send_task("inbox.drain", queue="inbox")

        def finished() -> int:
            row = conn.execute("SELECT count(*) FROM events WHERE state = 'completed'").fetchone()
            return int(row[0]) if row else 0

        procs.wait_progress(
            finished, a.events, "drain", lambda _: r.ctl.send_task("inbox.drain", queue="inbox")
        )
        last = conn.execute("SELECT extract(epoch FROM max(finished_at)) FROM events").fetchone()
    r.stop_all()
    seconds = float(last[0] if last else 0) - t0
    rate = a.events / seconds
    return {"keys": keys, "ordered": ordered, "seconds": round(seconds, 2), "per_s": round(rate, 1)}


def run_drain(r: Run) -> list[dict[str, Any]]:
    out = []
    for keys in [int(k) for k in r.args.keys.split(",")]:
        plain = _drain(r, keys, False)
        ordered = _drain(r, keys, True)
        ordered["ratio"] = round(ordered["per_s"] / plain["per_s"], 2)
        for row in (plain, ordered):
            print(json.dumps(row), flush=True)
        out += [plain, ordered]
    return out


# -- 3. fairness ---------------------------------------------------------------------------

_BACKLOG = """
    INSERT INTO events (public_id, tenant_id, source_id, event_type, business_key_digest,
                        ordering_key, content_type, body, body_sha256, response_status,
                        response_body, available_at)
    SELECT 'evt_hot_' || g, %(t)s, %(s)s, %(type)s, k, CASE WHEN %(lane)s THEN k END,
           'application/json', convert_to(%(body)s, 'UTF8'), '\\x00', 202, '',
           CASE WHEN %(lane)s AND g > 1 THEN CAST(%(parked)s AS timestamptz) ELSE now() END
      FROM generate_series(1, %(n)s) g, LATERAL (SELECT sha256('hot'::bytea) AS k) x
"""


def _quiet_p99(r: Run, port: int, src: Any, tag: str) -> float:
    """The quiet side's events, 0.2 s apart; their receipt->completed p99 (seconds)."""
    ids = []
    for i in range(r.args.quiet):
        payload = {"type": LANE_TYPE, "entity": f"{tag}{i}", "seq": 0, "ms": 5}
        ids.append(_post(port, src.path, payload, f"{tag}-{i}"))
        time.sleep(0.2)
    with psycopg.connect(r.url, autocommit=True) as conn:

        def done() -> int:
            row = conn.execute(
                "SELECT count(*) FROM events WHERE public_id = ANY(%s) AND state = 'completed'",
                (ids,),
            ).fetchone()
            return int(row[0]) if row else 0

        procs.wait_progress(done, len(ids), tag)
        rows = conn.execute(
            "SELECT extract(epoch FROM finished_at - received_at) FROM events"
            " WHERE public_id = ANY(%s)",
            (ids,),
        ).fetchall()
    return _pct([float(x[0]) for x in rows], 0.99)


def run_fairness(r: Run) -> list[dict[str, Any]]:
    a = r.args
    env = r.env()
    worker = r.start(procs.celery_worker("workers.app", "inbox", a.concurrency, env, "fair-w"))
    web, port = procs.web("web.wsgi:app", {**env, "INBOX_DB_POOL_SIZE": "8"}, 2, 8, "fair-web")
    r.start(web)
    procs.wait_http(web, port)
    procs.wait_celery(r.ctl, worker)
    out = []
    cases = [
        ("tenant", r.sources["unordered"], r.quiet, False),
        ("lane", r.sources["ordered"], r.sources["ordered"], True),
    ]
    for name, hot, quiet, lane_ in cases:
        cpu.wait_quiet(30)
        unloaded = _quiet_p99(r, port, quiet, f"{name}-idle-")
        body = json.dumps({"type": LANE_TYPE, "entity": "hot", "seq": 0, "ms": 5})
        with psycopg.connect(r.url, autocommit=True) as conn:
            conn.execute(
                _BACKLOG,
                {
                    "t": hot.tenant_id,
                    "s": hot.id,
                    "type": LANE_TYPE,
                    "lane": lane_,
                    "body": body,
                    "n": a.fair_backlog,
                    "parked": PARKED_UNTIL,
                },
            )
            r.ctl.send_task("inbox.drain", queue="inbox")
            loaded = _quiet_p99(r, port, quiet, f"{name}-busy-")
            left = conn.execute(
                "SELECT count(*) FROM events WHERE public_id LIKE 'evt_hot_%%'"
                " AND state <> 'completed'"
            ).fetchone()
            conn.execute("DELETE FROM events WHERE public_id LIKE 'evt_hot_%%'")
        row = {
            "fairness": name,
            "backlog": a.fair_backlog,
            "backlog_left": int(left[0]) if left else 0,
            "quiet_p99_unloaded_s": round(unloaded, 3),
            "quiet_p99_loaded_s": round(loaded, 3),
            "bar_s": round(2 * unloaded + 1, 3),
            "ok": loaded <= 2 * unloaded + 1,
        }
        print(json.dumps(row), flush=True)
        out.append(row)
    r.stop_all()
    return out


def main() -> None:
    args = parse_args()
    skip = set(filter(None, args.skip.split(",")))
    procs.use_own_kek()
    r = Run(args)
    report: dict[str, Any] = {"args": vars(args), "load": os.getloadavg()}
    try:
        if "latency" not in skip:
            report["latency"] = run_latency(r)
        if "drain" not in skip:
            report["drain"] = run_drain(r)
        if "fairness" not in skip:
            report["fairness"] = run_fairness(r)
    finally:
        r.close()
        procs.drop_database(args.pg_url, r.dbname)
    procs.RESULTS.mkdir(exist_ok=True)
    procs.write_report(Path(args.out), report)


if __name__ == "__main__":
    main()
