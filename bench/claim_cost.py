"""PostgreSQL's CPU per claimed row: the claiming statement on one connection, its backend's
CPU read from /proc, beside the same statement on a database that still has the foreign
keys from events into tenants and sources (dropped by migration 0016).

The ingest benchmark's PostgreSQL figure (CPU ms per 2xx) carries wrk, both receivers and
this machine's drifting speed; this one isolates the statement: two fresh databases on one
server, the same rows (signed 1 KiB JSON events, a new key each), claims of ``--rows`` rows
sent back to back, the databases taking turns round by round so that both see the same
machine. The first round warms up and is not counted.

    .venv/bin/python -m bench.claim_cost [--rows 8] [--statements 300] [--rounds 13]

Needs the server on this machine (its backends' CPU is read from /proc): a private cluster
by default, or ``--pg-url`` for a local server of your own. JSON goes to
bench/results/claim_cost.json.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from bench.common import procs
from bench.common.load import make_body
from inbox.store import claims

# What migration 0016 dropped, put back on the comparison's database.
OLD_KEYS = (
    "ALTER TABLE events ADD CONSTRAINT fk_events_tenant_id_tenants"
    " FOREIGN KEY (tenant_id) REFERENCES tenants (id)",
    "ALTER TABLE events ADD CONSTRAINT fk_events_source_id_sources"
    " FOREIGN KEY (source_id) REFERENCES sources (id)",
)
VARIANTS = {"head": (), "old foreign keys": OLD_KEYS}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.claim_cost", description=__doc__)
    p.add_argument("--rows", type=int, default=8, help="rows per claiming statement")
    p.add_argument("--statements", type=int, default=300, help="statements per round")
    p.add_argument("--rounds", type=int, default=13, help="rounds, the first not counted")
    p.add_argument("--pg-url", default=os.environ.get("BENCH_PG_URL"), help="a local server")
    p.add_argument("--out", type=Path, default=procs.RESULTS / "claim_cost.json")
    return p.parse_args(argv)


def backend_cpu_s(pid: int) -> float:
    """User and system CPU of one backend so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Claimant:
    """One database with one tenant and source, and one autocommit connection to it."""

    def __init__(self, url: str, ddl: tuple[str, ...]) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        for statement in ddl:
            self.conn.execute(statement)
        made = self.conn.execute("INSERT INTO tenants (name) VALUES ('bench') RETURNING id")
        self.tenant_id = _one(made)
        made = self.conn.execute(
            "INSERT INTO sources (tenant_id, name, scheme) VALUES (%s, 'own', 'hmac') RETURNING id",
            (self.tenant_id,),
        )
        self.source_id = _one(made)
        self.pid = self.conn.info.backend_pid
        self.info: dict[Any, Any] = {}
        self.body = make_body("claim-cost")
        self.headers = json.dumps({"content-type": "application/json", "user-agent": "bench"})

    def row(self) -> tuple[Any, ...]:
        """One claim's parameters, in ``inbox.store.claims.row``'s order."""
        return (
            f"evt_{secrets.token_hex(12)}",
            *(self.tenant_id, self.source_id, secrets.token_bytes(32), 72, "bench.event"),
            *(None, None, "application/json", self.body, hashlib.sha256(self.body).digest()),
            *(self.headers, 202, b'{"status":"accepted"}', False, 5),
        )

    def round(self, statements: int, rows: int) -> float:
        """The backend's CPU seconds for ``statements`` claims of ``rows`` rows."""
        batches = [[self.row() for _ in range(rows)] for _ in range(statements)]
        before = backend_cpu_s(self.pid)
        for batch in batches:
            claims.execute_on(self.conn, self.info, batch, time.monotonic() + 30)
        return backend_cpu_s(self.pid) - before


def _one(cur: psycopg.Cursor[Any]) -> int:
    found = cur.fetchone()
    assert found is not None
    return int(found[0])


@contextlib.contextmanager
def server(pg_url: str | None) -> Iterator[str]:
    from dev.embedded import PrivatePostgres

    if pg_url is not None:
        yield pg_url
        return
    cluster = PrivatePostgres()
    try:
        yield cluster.url
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    procs.RESULTS.mkdir(parents=True, exist_ok=True)
    cpu = {name: 0.0 for name in VARIANTS}
    with server(args.pg_url) as pg_url:
        made = {name: procs.create_database(pg_url, "inbox_claim_cost") for name in VARIANTS}
        try:
            who = {name: Claimant(made[name][1], ddl) for name, ddl in VARIANTS.items()}
            names = list(VARIANTS)
            for n in range(args.rounds):
                for name in names if n % 2 else names[::-1]:
                    spent = who[name].round(args.statements, args.rows)
                    if n:
                        cpu[name] += spent
            for c in who.values():
                c.conn.close()
        finally:
            for name, _url in made.values():
                procs.drop_database(pg_url, name)
    counted = args.statements * args.rows * (args.rounds - 1)
    per_row = {name: spent / counted * 1e6 for name, spent in cpu.items()}
    for name, us in per_row.items():
        print(f"{name:17} {us:6.1f} us of backend CPU per claimed row")
    print(f"head / old foreign keys: {per_row['head'] / per_row['old foreign keys']:.2f}")
    procs.write_report(
        args.out,
        {
            "rows_per_statement": args.rows,
            "rows_counted": counted,
            "backend_cpu_us_per_row": per_row,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
