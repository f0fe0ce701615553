"""Scale benchmark: the ledger with a year's worth of events beside an empty one, in one run.

Two databases side by side on one PostgreSQL cluster, made the same way (migrated, the
same tenants, sources and endpoints: ``bench/scale/ledger.py``); one is filled by COPY
with ``--events`` synthetic events (small bodies, mostly terminal states, deliveries and
attempts) over ``--days`` daily partitions, then vacuumed and analyzed. The same code
then measures both, alternating (empty, filled, filled, empty, ... over ``--repeats``):

- ingest: accepted events/s and p99 at 32 senders (wrk, unique keys, the receiver under
  ``python -m web``, no broker) - target: the filled ledger within 10 % of the empty one;
- the admin API's and the console's event list and one event, one client, one request at
  a time - target: p99 at most 50 ms;
- drain: ``--drain-events`` pending events of a no-op playbook, one worker with
  ``--concurrency 2`` - target: within 10 %;
- on the filled ledger: dropping one day's partitions (detach + drop, every ledger table)
  against deleting the same rows (in a transaction that is then rolled back, so the same
  rows serve both) - target: the drop at most 1 s.

Then the sizing: bytes on disk per event (``pg_total_relation_size`` over every ledger
table's partitions, indexes and TOAST), and per day at 100k and 10M events a day.

    .venv/bin/python -m bench.scale --events 1000000   # a quicker look, still 90 days
    .venv/bin/python -m bench.scale                    # 10M events, 90 days

Prints a table and writes bench/results/scale.json. The exit status is non-zero only
when the benchmark itself fails, never for a missed target.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import psycopg

from bench.common import cpu, load, procs
from bench.scale import fill, ledger, phases
from dev.embedded import PrivatePostgres

RATIO_MIN = 0.9  # the filled ledger's throughput against the empty one's
P99_RATIO_MAX = 1.1  # ... and its ingest p99
READ_P99_MS = 50.0
DROP_S = 1.0
SIZING_PER_DAY = (100_000, 10_000_000)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=10_000_000, help="events in the filled ledger")
    p.add_argument("--days", type=int, default=90, help="daily partitions they span")
    p.add_argument("--repeats", type=int, default=4, help="rounds, the databases alternating")
    p.add_argument("--seconds", type=float, default=10.0, help="ingest: measured window")
    p.add_argument("--warmup", type=float, default=2.0, help="ingest: unrecorded warm-up")
    p.add_argument("--senders", type=int, default=32, help="ingest: concurrent senders")
    p.add_argument("--reads", type=int, default=200, help="requests per kind of read")
    p.add_argument(
        "--read-warmup",
        type=int,
        default=40,
        help="unrecorded reads per kind (every pooled connection of the server sees some)",
    )
    p.add_argument("--fill-jobs", type=int, default=2, help="processes filling days at once")
    p.add_argument("--drain-events", type=int, default=50_000, help="pending events drained")
    procs.server_arguments(p)
    p.add_argument("--skip", default="", help="comma-separated: ingest,drain,drop")
    p.add_argument(
        "--keep",
        action="store_true",
        help="leave the databases (and the private cluster) running, to look into them; their"
        " signing secrets are under the run's INBOX_KEK: set it before the run to reuse them",
    )
    p.add_argument("--out", type=Path, default=procs.RESULTS / "scale.json")
    args = p.parse_args(argv)
    args.skip_set = {s for s in args.skip.split(",") if s}
    if not load.wrk_available():
        p.error("wrk is not installed (apt-get install wrk)")
    return args


def _say(line: str) -> None:
    print(line, flush=True)


def _fill_settings(pg_url: str, on: bool) -> None:
    """Checkpoints far apart while the fill writes (as a bulk load would be run), and
    back to the server's own settings before anything is measured."""
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            if on:
                conn.execute("ALTER SYSTEM SET max_wal_size = '8GB'")
            else:
                conn.execute("ALTER SYSTEM RESET max_wal_size")
            conn.execute("SELECT pg_reload_conf()")
    except psycopg.Error as exc:  # a server of one's own may not allow it
        _say(f"  (fill settings not changed: {exc})")


def _database(pg_url: str, kind: str) -> dict[str, Any]:
    name, url = procs.create_database(pg_url, prefix=f"inbox_scale_{kind}")
    layout = ledger.setup(url)
    return {"kind": kind, "name": name, "url": url, "layout": layout}


def _round(
    args: argparse.Namespace, broker: phases.Broker, db: dict[str, Any], n: int
) -> dict[str, Any]:
    tag = f"{db['kind']}-{n}-{uuid.uuid4().hex[:6]}"
    out: dict[str, Any] = {"db": db["kind"], "round": n}
    layout = db["layout"]
    if "ingest" not in args.skip_set:
        out.update(
            phases.ingest_and_reads(
                args, db["url"], db["name"], tag, db["token"], layout.source_ids[ledger.SOURCE]
            )
        )
        ing = out["ingest"]
        _say(
            f"  {db['kind']:6} ingest {ing['ok_per_s']:,.0f}/s p99 {ing['p99_ms']:.1f} ms; reads"
            " p99 " + ", ".join(f"{k} {v['p99_ms']:.1f}" for k, v in out["reads"].items())
        )
    if "drain" not in args.skip_set:
        source = db["layout"].source_ids[ledger.DRAIN_SOURCE]
        out["drain"] = phases.drain(args, broker, db["url"], source, tag)
        _say(f"  {db['kind']:6} drain {out['drain']['per_s']:,.0f} events/s")
    return out  # fmt: skip


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(rounds: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per database, the median over the rounds of every figure."""
    out: dict[str, dict[str, float | None]] = {}
    for kind in ("empty", "filled"):
        mine = [r for r in rounds if r["db"] == kind]
        figs: dict[str, float | None] = {
            "ingest 2xx/s": _median([r["ingest"]["ok_per_s"] for r in mine if "ingest" in r]),
            "ingest p99 ms": _median([r["ingest"]["p99_ms"] for r in mine if "ingest" in r]),
            "drain events/s": _median([r["drain"]["per_s"] for r in mine if "drain" in r]),
        }
        for r in mine:
            for name in r.get("reads", {}):
                figs[f"{name} p99 ms"] = _median(
                    [x["reads"][name]["p99_ms"] for x in mine if "reads" in x]
                )
        out[kind] = figs
    return out


def judge(
    summary: dict[str, dict[str, float | None]], drop: dict[str, Any] | None
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    empty, filled = summary["empty"], summary["filled"]
    for name, e in empty.items():
        f = filled.get(name)
        ratio = f / e if e and f is not None else None
        if name in ("ingest 2xx/s", "drain events/s"):
            target, met = f">= {RATIO_MIN:.2f}x empty", ratio is not None and ratio >= RATIO_MIN
        elif name == "ingest p99 ms":
            target = f"<= {P99_RATIO_MAX:.2f}x empty"
            met = ratio is not None and ratio <= P99_RATIO_MAX
        else:
            target = f"<= {READ_P99_MS:.0f} ms"
            met = f is not None and e is not None and max(f, e) <= READ_P99_MS
        rows.append({"measure": name, "empty": e, "filled": f, "ratio": ratio,
                     "target": target, "met": met if e is not None else None})  # fmt: skip
    if drop:
        rows.append({"measure": "drop one day's partitions s", "empty": drop.get("empty_drop_s"),
                     "filled": drop["drop_s"], "ratio": None, "target": f"<= {DROP_S:.0f} s",
                     "met": drop["drop_s"] <= DROP_S})  # fmt: skip
        rows.append({"measure": "DELETE the same rows s", "empty": None,
                     "filled": drop["delete_s"], "ratio": None, "target": "(for comparison)",
                     "met": None})  # fmt: skip
    return rows


def sizing(conn: psycopg.Connection, events: int) -> dict[str, Any]:
    tables = ledger.sizes(conn)
    total = sum(tables.values())
    per_event = total / max(events, 1)
    database = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return {
        "events": events,
        "bytes_by_table": tables,
        "bytes_total": total,
        "bytes_per_event": round(per_event),
        "per_day": {str(n): round(per_event * n) for n in SIZING_PER_DAY},
        "database_bytes": database[0] if database else None,
    }


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"


def print_report(report: dict[str, Any]) -> None:
    f = report["fill"]
    _say(
        f"\nfilled: {f['rows']['events']:,} events over {f['days']} days "
        f"({', '.join(f'{k} {v:,}' for k, v in f['rows'].items())}); COPY {f['copy_seconds']} s"
        f" ({f['events_per_s']:,} events/s), VACUUM ANALYZE {f['vacuum_analyze_seconds']} s"
    )
    _say("| measure | empty ledger | filled ledger | filled/empty | target | met |")
    _say("|---|---|---|---|---|---|")
    for r in report["targets"]:
        met = {None: "-", True: "yes", False: "**no**"}[r["met"]]
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        _say(
            f"| {r['measure']} | {_fmt(r['empty'])} | {_fmt(r['filled'])} | {ratio} |"
            f" {r['target']} | {met} |"
        )
    s = report["sizing"]
    _say(
        f"\nsizing: {s['bytes_per_event']:,} bytes per event on disk (ledger tables, indexes,"
        f" TOAST); per day: "
        + ", ".join(f"{int(n):,}/day -> {b / 2**30:.2f} GiB" for n, b in s["per_day"].items())
    )
    _say(
        "  by table: "
        + ", ".join(f"{k} {v / 2**20:,.0f} MiB" for k, v in s["bytes_by_table"].items())
    )
    m = report["machine"]
    _say(f"machine: {m['cpus']} cores, load average {m['loadavg']}, speed probe per CPU (us): "
         + "; ".join(m["speed_probes_us"]))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    procs.use_own_kek()
    args = parse_args(argv)
    procs.RESULTS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    cluster = None
    if args.pg_url is None:
        cluster = PrivatePostgres()
        args.pg_url = cluster.url
    dbs: list[dict[str, Any]] = []
    broker = None
    report: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    status = 0
    try:
        dbs = [_database(args.pg_url, "empty"), _database(args.pg_url, "filled")]
        empty, filled = dbs
        _say(f"filling {filled['name']} with {args.events:,} events over {args.days} days")
        _fill_settings(args.pg_url, True)
        report["fill"] = fill.fill(
            filled["url"], filled["layout"], args.events, args.days, args.fill_jobs, _say
        )
        _fill_settings(args.pg_url, False)
        fill.vacuum(empty["url"])
        with psycopg.connect(filled["url"]) as conn:
            report["sizing"] = sizing(conn, report["fill"]["rows"]["events"])
        for db in dbs:
            db["token"] = phases.token(db["url"])
        broker = phases.Broker()
        probes: list[str] = []
        rounds: list[dict[str, Any]] = []
        for n in range(1, args.repeats + 1):
            for db in dbs if n % 2 else dbs[::-1]:
                probes.append(cpu.shown(cpu.probe_cpus()))
                rounds.append(_round(args, broker, db, n))
        drop = None
        if "drop" not in args.skip_set:
            drop = ledger.drop_versus_delete(filled["url"], empty["url"], report["fill"])
        report.update({
            "settings": {k: v for k, v in vars(args).items() if k not in ("skip_set", "out")},
            "machine": {"cpus": os.cpu_count(), "speed_probes_us": probes,
                        "loadavg": " ".join(Path("/proc/loadavg").read_text().split()[:3])},
            "rounds": rounds,
            "drop": drop,
            "summary": summarize(rounds),
        })  # fmt: skip
        report["targets"] = judge(report["summary"], drop)
        report["run_seconds"] = round(time.monotonic() - started)
        print_report(report)
    except Exception:
        traceback.print_exc()
        report["error"] = traceback.format_exc()
        status = 1
    finally:
        if broker is not None:
            broker.stop()
        if args.keep:
            _say(
                "kept: "
                + ", ".join(db["url"] for db in dbs)
                + (f" (stop: pg_ctl -D {cluster.data} stop)" if cluster else "")
            )
        else:
            for db in dbs:
                procs.drop_database(args.pg_url, db["name"])
            if cluster is not None:
                cluster.stop()
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    _say(f"\nrun took {round(time.monotonic() - started)} s; wrote {args.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
