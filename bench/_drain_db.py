"""The drain benchmark's database: a fresh migrated database, its sources, pending events."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import psycopg
from sqlalchemy import create_engine

from inbox.domain.sources import SourceOptions
from inbox.store import migrate
from inbox.store import sources as store
from inbox.store.engine import sqlalchemy_url

EVENT_TYPE = "bench.noop"
BODY = json.dumps({"type": EVENT_TYPE}, separators=(",", ":"))


def with_db(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    return base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")


def create_database(server_url: str) -> tuple[str, str]:
    """A fresh database migrated to head; returns (name, url)."""
    name = f"inbox_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = with_db(server_url, name)
    migrate.upgrade(url)
    return name, url


def drop_database(server_url: str, name: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass(frozen=True)
class BenchSource:
    id: int
    tenant_id: int
    path: str


def create_sources(
    url: str, tenant: str, playbook: str, secret: str, names: dict[str, str]
) -> dict[str, BenchSource]:
    """One tenant and the named sources (name -> scheme), all running ``playbook``."""
    engine = create_engine(sqlalchemy_url(url))
    out: dict[str, BenchSource] = {}
    try:
        with engine.begin() as conn:
            store.create_tenant(conn, tenant)
            for name, scheme in names.items():
                secrets = [secret] if scheme != "none" else []
                src = store.create_source(
                    conn,
                    tenant,
                    name,
                    scheme,
                    secrets,
                    SourceOptions.from_dict({"playbook": playbook}),
                )
                out[name] = BenchSource(src.id, src.tenant_id, src.path)
    finally:
        engine.dispose()
    return out


def reset_events(conn: psycopg.Connection) -> None:
    conn.execute("TRUNCATE events CASCADE")


def insert_pending(conn: psycopg.Connection, src: BenchSource, n: int, prefix: str) -> None:
    """n accepted events, as the receiver stores them, in one statement; then ANALYZE."""
    conn.execute(
        "INSERT INTO events (public_id, tenant_id, source_id, event_type, content_type,"
        " body, body_sha256, response_status, response_body)"
        " SELECT %(prefix)s || g, %(t)s, %(s)s, %(type)s, 'application/json',"
        " convert_to(%(body)s, 'UTF8'), '\\x00', 202, '' FROM generate_series(1, %(n)s) g",
        {
            "prefix": f"evt_{prefix}_",
            "t": src.tenant_id,
            "s": src.id,
            "type": EVENT_TYPE,
            "body": BODY,
            "n": n,
        },
    )
    conn.execute("ANALYZE events")


def backend_pids(conn: psycopg.Connection, dbname: str) -> list[int]:
    """Server processes serving the benchmark database, except this connection's own."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
        (dbname,),
    ).fetchall()
    return [int(r[0]) for r in rows]


def progress(conn: psycopg.Connection, source_id: int | None = None) -> tuple[int, int, float]:
    """(completed, quarantined, epoch of the latest finished_at) over the events table."""
    where = "" if source_id is None else f" WHERE source_id = {int(source_id)}"
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE state = 'completed'),"
        " count(*) FILTER (WHERE state = 'quarantined'),"
        " coalesce(extract(epoch FROM max(finished_at)), 0)"
        f" FROM events{where}"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), float(row[2])
