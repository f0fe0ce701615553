"""What a step's callbacks cost to write, with the intents keeping their delivery's body.

    .venv/bin/python -m bench.pipeline.intent_write [--steps 1000] [--rounds 3]

One callback fanned out to two endpoints, ``--steps`` times per way, in a transaction
each, against a database of its own on the shared server (created and dropped here):
``before``: the write as it was before migration 0029 (the endpoints read for the intents,
the intents inserted, the endpoints read again for the deliveries, the deliveries
inserted: rebuilt here from that commit's statements); ``now``: ``intents.enqueue`` (the
endpoints read once, then the intents, with the envelope they keep, and the deliveries
in one statement). Prints the statements per step and the median wall time per step of
each round, the two ways alternating.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from sqlalchemy import Connection, event, text

from inbox.domain import callbacks, ledger
from inbox.domain.callbacks import Outgoing
from inbox.domain.records import EndpointId, EventId, TenantId
from inbox.domain.sources import SourceOptions
from inbox.infra import keyring
from inbox.infra.config import Settings
from inbox.store.db import sealing
from inbox.store.db.engine import make_engine
from inbox.store.schema import migrate
from inbox.store.write import deliveries, intents
from inbox.store.write import endpoints as estore
from inbox.store.write import sources as sstore

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
NAME = "inbox_bench_intent_write"

_BEFORE_INTENTS = text(
    "INSERT INTO callback_intents (public_id, tenant_id, endpoint_id, event_id, step,"
    " event_type) VALUES (:p, :t, :e, :ev, :step, :type) ON CONFLICT (public_id) DO NOTHING"
)

Write = Callable[[Connection, TenantId, EventId, str, list[Outgoing]], set[EndpointId]]


def before(
    conn: Connection, tenant: TenantId, ev: EventId, pid: str, msgs: list[Outgoing]
) -> set[EndpointId]:
    eps = conn.execute(
        text("SELECT id, event_types, filter FROM endpoints WHERE tenant_id = :t ORDER BY id"),
        {"t": tenant},
    ).fetchall()
    rows = [
        {
            "p": callbacks.delivery_id(pid, "s", i, ep.id),
            "t": tenant,
            "e": ep.id,
            "ev": ev,
            "step": "s",
            "type": m.event_type,
        }
        for i, m in enumerate(msgs)
        for ep in eps
    ]
    conn.execute(_BEFORE_INTENTS, rows)
    return deliveries.enqueue(conn, tenant, "acme", ev, pid, "s", msgs)


def now(
    conn: Connection, tenant: TenantId, ev: EventId, pid: str, msgs: list[Outgoing]
) -> set[EndpointId]:
    return intents.enqueue(conn, tenant, "acme", ev, pid, "s", msgs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    # The endpoints' secrets are stored wrapped: a key of this run's own, its database
    # dropped at the end.
    os.environ.setdefault("INBOX_KEK", keyring.new_key())
    with psycopg.connect(SERVER, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{NAME}"')
        c.execute(f'CREATE DATABASE "{NAME}"')
    url = SERVER.rsplit("/", 1)[0] + "/" + NAME
    try:
        migrate.upgrade(url)
        engine = make_engine(Settings(database_url=url))
        with engine.begin() as conn:
            sstore.create_tenant(conn, "acme")
            sstore.create_source(conn, "acme", "s", "hmac", ["x"], SourceOptions())
            for i in range(2):
                estore.create_endpoint(
                    conn, "acme", f"http://127.0.0.1:9/{i}", callbacks.new_secret()
                )
            tenant = TenantId(conn.execute(text("SELECT id FROM tenants")).scalar_one())
        keys = sealing.for_engine(engine)
        statements = [0]

        def count(*_: Any) -> None:
            statements[0] += 1

        event.listen(engine, "before_cursor_execute", count)
        today = dt.datetime.now(dt.UTC).date()
        seq = 0
        out: dict[str, list[float]] = {"before": [], "now": []}
        per_step: dict[str, float] = {}
        ways: list[tuple[str, Write]] = [("before", before), ("now", now)]
        for _ in range(args.rounds):
            for label, write in ways:
                times = []
                statements[0] = 0
                for i in range(args.steps):
                    seq += 1
                    ev = EventId(ledger.make_id(today, seq))
                    keys.loaded(ev, None)  # as the worker that loaded the event has it
                    msg = Outgoing("order.paid", {"n": i, "x": "y" * 200}, dt.datetime.now(dt.UTC))
                    with engine.begin() as conn:
                        t0 = time.perf_counter()
                        write(conn, tenant, ev, f"evt_{seq:024x}", [msg])
                        times.append(time.perf_counter() - t0)
                out[label].append(statistics.median(times) * 1000)
                per_step[label] = statements[0] / args.steps
        for label, medians in out.items():
            shown = ", ".join(f"{m:.2f}" for m in medians)
            print(f"{label:<7} {per_step[label]:.0f} statements per step; median ms: {shown}")
        engine.dispose()
    finally:
        with psycopg.connect(SERVER, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{NAME}" WITH (FORCE)')


if __name__ == "__main__":
    main()
