"""What ``bench.drain_peers`` has the inbox's workers run, and the pending events they drain.

The no-op playbook (one effect-free step) and the 2-step playbook of ``bench.limits``
(``two_step``: an effect-free step, then an effect row keyed by the step key, INSERT … ON
CONFLICT DO NOTHING, through a connection of the worker's own to ``BENCH_EFFECTS_URL``).
Workers load it by ``INBOX_PLAYBOOKS``. Run as a script (``python drain_playbooks.py
prepare URL EVENTS WORKLOAD``), by the checkout's own interpreter, it migrates the run's
database, makes one source for the workload's playbook and stores EVENTS pending events as
the receiver stores them (``fill_pending``; ``bench.drain`` fills its no-op drain the same
way); ``python drain_playbooks.py fill URL EVENTS WORKLOAD`` stores more for that source.
It imports only the inbox's public API and store, so another checkout (``bench.drain_peers
--checkout``) loads it from a copy without this checkout's ``bench`` package.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

import psycopg

from inbox import Playbook, StepContext, register

TENANT = "bench"
EVENT_TYPES = {"noop": "peers.noop", "2step": "peers.two-step"}
EFFECTS_TABLE = "CREATE TABLE IF NOT EXISTS bench_effects (step_key text PRIMARY KEY)"

noop = register(Playbook("peers-noop"), event_type=EVENT_TYPES["noop"])
two_step = register(Playbook("peers-two-step"), event_type=EVENT_TYPES["2step"])
PLAYBOOKS = {"noop": noop, "2step": two_step}


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
        conn = _effects.conn = psycopg.connect(os.environ["BENCH_EFFECTS_URL"], autocommit=True)
    conn.execute(
        "INSERT INTO bench_effects (step_key) VALUES (%s) ON CONFLICT DO NOTHING", (ctx.step_key,)
    )
    return {"applied": True}


# Pending events as the receiver leaves them (state 'received', answered 202), in one
# statement; the body names the event type the source's playbook is registered for.
PENDING = """
    INSERT INTO events (public_id, tenant_id, source_id, event_type, content_type, body,
                        body_sha256, response_status, response_body)
    SELECT %(prefix)s || g, %(t)s, %(s)s, %(type)s, 'application/json',
           convert_to(%(body)s, 'UTF8'), '\\x00', 202, '' FROM generate_series(1, %(n)s) g
"""


def fill_pending(
    conn: psycopg.Connection[Any], tenant_id: int, source_id: int, n: int, prefix: str, kind: str
) -> None:
    """``n`` pending events of ``kind`` (an event type) for one source, then ANALYZE."""
    body = json.dumps({"type": kind}, separators=(",", ":"))
    params = {"prefix": prefix, "t": tenant_id, "s": source_id, "n": n}
    conn.execute(PENDING, {**params, "type": kind, "body": body})
    conn.execute("ANALYZE events")


def prepare(url: str, n: int, workload: str, secret: str = "") -> None:
    """The run's database: migrated, one tenant, one source running the workload's
    playbook (``secret``: signed with the ``hmac`` scheme, for events sent through the
    receiver), ``n`` pending events, and the effects table."""
    from sqlalchemy import create_engine

    from inbox.domain.sources import SourceOptions
    from inbox.store.db.engine import sqlalchemy_url
    from inbox.store.schema import migrate
    from inbox.store.write import sources as store

    migrate.upgrade(url)
    engine = create_engine(sqlalchemy_url(url))
    options = SourceOptions.from_dict({"playbook": PLAYBOOKS[workload].name})
    with engine.begin() as conn:
        store.create_tenant(conn, TENANT)
        scheme, secrets = ("hmac", [secret]) if secret else ("none", [])
        source = store.create_source(conn, TENANT, workload, scheme, secrets, options)
    engine.dispose()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(EFFECTS_TABLE)
        fill_pending(conn, source.tenant_id, source.id, n, "evt_", EVENT_TYPES[workload])


def fill(url: str, n: int, workload: str) -> None:
    """``n`` more pending events for the workload's source (made by ``prepare``)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT tenant_id, id FROM sources WHERE name = %s", (workload,))
        tenant_id, source_id = row.fetchone() or (0, 0)
        fill_pending(conn, tenant_id, source_id, n, "evt_", EVENT_TYPES[workload])


if __name__ == "__main__":
    command, url, events, workload = sys.argv[1:5]
    if command == "prepare":
        prepare(url, int(events), workload, *sys.argv[5:6])
    elif command == "fill":
        fill(url, int(events), workload)
    else:
        raise SystemExit(f"unknown command {command!r}")
