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
import os
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from bench.common import cpu, procs
from bench.common.load import make_body
from inbox.domain.intake import Prepared
from inbox.domain.records import Source, SourceId, TenantId
from inbox.domain.sources import SourceOptions
from inbox.store.db import claims

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
        self.source = Source(
            id=SourceId(_one(made)),
            tenant_id=TenantId(self.tenant_id),
            tenant="bench",
            name="own",
            scheme="hmac",
            enabled=True,
            options=SourceOptions(),
            secrets=(),
        )
        self.pid = self.conn.info.backend_pid
        self.info: dict[Any, Any] = {}
        self.body = make_body("claim-cost")

    def row(self) -> tuple[Any, ...]:
        """One claim's parameters (``inbox.store.db.claims.row``): a new key each."""
        event = Prepared(
            public_id=f"evt_{secrets.token_hex(12)}",
            key_digest=secrets.token_bytes(32),
            key_expires_hours=72,
            event_type="bench.event",
            business_key_digest=None,
            content_type="application/json",
            body=self.body,
            body_sha256=hashlib.sha256(self.body).digest(),
            headers={"content-type": "application/json", "user-agent": "bench"},
            response_status=202,
            response_body=b'{"status":"accepted"}',
            wait_seconds=None,
        )
        return claims.row(self.source, event)

    def round(self, statements: int, rows: int) -> float:
        """The backend's CPU seconds for ``statements`` claims of ``rows`` rows."""
        batches = [[self.row() for _ in range(rows)] for _ in range(statements)]
        before = cpu.process_seconds(self.pid)
        for batch in batches:
            claims.execute_on(self.conn, self.info, batch, time.monotonic() + 30)
        return cpu.process_seconds(self.pid) - before


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
    spent_s = {name: 0.0 for name in VARIANTS}
    with server(args.pg_url) as pg_url:
        made = {name: procs.create_database(pg_url, "inbox_claim_cost") for name in VARIANTS}
        try:
            who = {name: Claimant(made[name][1], ddl) for name, ddl in VARIANTS.items()}
            names = list(VARIANTS)
            for n in range(args.rounds):
                for name in names if n % 2 else names[::-1]:
                    spent = who[name].round(args.statements, args.rows)
                    if n:
                        spent_s[name] += spent
            for c in who.values():
                c.conn.close()
        finally:
            for name, _url in made.values():
                procs.drop_database(pg_url, name)
    counted = args.statements * args.rows * (args.rounds - 1)
    per_row = {name: spent / counted * 1e6 for name, spent in spent_s.items()}
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
