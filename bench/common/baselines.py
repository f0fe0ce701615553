"""What the benchmarks compare against, each served by processes of its own; nothing here
connects to a database or a broker on import (the tables are made by a process's first
request, or by ``ensure_table``).

**Ingest** (bench/ingest.py): receivers a user might write instead of the inbox.

``handwritten``, the one the targets are judged against: what a good team writes in an
afternoon, written well:

- one Flask route, ``POST /hooks/<tenant>/<source>``;
- one HMAC check of the ``hmac`` scheme (``X-Signature`` = hex HMAC-SHA256 over
  ``{X-Timestamp}.{body}``, compared in constant time, timestamp within 300 s), then the
  body parsed as JSON (400 if it is not);
- a psycopg connection pool (``psycopg_pool``, as many connections per process as the
  inbox's INBOX_DB_POOL_SIZE), connections in autocommit;
- one ``INSERT ... ON CONFLICT (idempotency_key) DO NOTHING RETURNING id``: 202 when the
  row went in, 200 when the key was there already.

It keeps no headers, no stored response, no body hash or conflict records, no tenant in
the key, and the key in clear: the contract it skips is what the inbox adds.

``naive``, a second labelled row: the same check and one INSERT into a table without a
unique key, on a new connection per request (``with psycopg.connect(DSN)``), no
idempotency at all (a redelivered event is stored again).

Configuration: ``DATABASE_URL``, ``BASELINE_SECRET`` (default ``benchsecret``),
``INBOX_DB_POOL_SIZE``. Run under the same server as the inbox, from the checkout's root:
``python -m web --app bench.common.baselines:handwritten`` (or ``...:naive``).

**Drain** (bench/drain.py): raw Celery's per-message ceiling, ``raw_app`` and its no-op task
``raw_noop`` (``celery -A bench.common.baselines:raw_app worker``). The worker starts on an
idle queue and is then told to consume ``RAW_QUEUE`` (already holding every message), so
start-up time is not measured. Each task counts itself with one Redis INCR; the one that
reaches the total records the time. ``raw_app`` is not the current app: the inbox's
workers import this module too (through bench.drain). Configuration: ``BENCH_BROKER_URL``,
``BENCH_RAW_PREFETCH``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import time

import psycopg
import redis
from celery import Celery
from flask import Flask, jsonify, request
from psycopg_pool import ConnectionPool

DSN = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SECRET = os.environ.get("BASELINE_SECRET", "benchsecret").encode()
POOL_SIZE = int(os.environ.get("INBOX_DB_POOL_SIZE") or 10)
TOLERANCE_SECONDS = 300

_CREATE = """
CREATE TABLE IF NOT EXISTS handwritten_events (
    id bigserial PRIMARY KEY,
    idempotency_key text NOT NULL UNIQUE,
    body bytea NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS naive_events (
    id bigserial PRIMARY KEY,
    body bytea,
    received_at timestamptz DEFAULT now()
)
"""
_INSERT = (
    "INSERT INTO handwritten_events (idempotency_key, body) VALUES (%s, %s)"
    " ON CONFLICT (idempotency_key) DO NOTHING RETURNING id"
)
_CREATE_LOCK = 0x68616E64  # processes whose first requests come at once create them in turn


def ensure_table(dsn: str = DSN) -> None:
    """Both receivers' tables, if they are not there yet."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_CREATE_LOCK,))
        conn.execute(_CREATE)


_tables_made = False
_tables_lock = threading.Lock()


def _tables() -> None:
    """The tables, made once per process by its first request."""
    global _tables_made
    if not _tables_made:
        with _tables_lock:
            if not _tables_made:
                ensure_table()
                _tables_made = True


def _autocommit(conn: psycopg.Connection) -> None:
    conn.autocommit = True


_pool: ConnectionPool | None = None
_pool_lock = threading.Lock()


def pool() -> ConnectionPool:
    """The process's pool, opened by its first request (after the server forked)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _tables()
            _pool = ConnectionPool(
                DSN, min_size=POOL_SIZE, max_size=POOL_SIZE, configure=_autocommit, timeout=5
            )
            _pool.wait()
        return _pool


handwritten = Flask("handwritten")
naive = Flask("naive")


def _signature_ok(ts: str, signature: str, body: bytes) -> bool:
    if not ts.isdigit() or abs(int(ts) - time.time()) > TOLERANCE_SECONDS:
        return False
    expected = hmac.new(SECRET, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


def _signed_body() -> bytes | None:
    """The request's body when its signature holds, else None."""
    body = request.get_data()
    ts, signature = request.headers.get("X-Timestamp", ""), request.headers.get("X-Signature", "")
    return body if _signature_ok(ts, signature, body) else None


@handwritten.post("/hooks/<tenant>/<source>")
def receive(tenant: str, source: str):  # type: ignore[no-untyped-def]
    body = _signed_body()
    if body is None:
        return jsonify({"error": "bad signature"}), 401
    key = request.headers.get("Idempotency-Key", "")
    if not key:
        return jsonify({"error": "Idempotency-Key is required"}), 400
    try:
        json.loads(body)
    except ValueError:
        return jsonify({"error": "the body is not JSON"}), 400
    with pool().connection() as conn:
        inserted = conn.execute(_INSERT, (key, body)).fetchone()
    if inserted is None:
        return jsonify({"status": "duplicate"}), 200
    return jsonify({"status": "accepted", "id": inserted[0]}), 202


@naive.post("/hooks/<tenant>/<source>")
def receive_naive(tenant: str, source: str):  # type: ignore[no-untyped-def]
    body = _signed_body()
    if body is None:
        return jsonify({"error": "bad signature"}), 401
    _tables()
    with psycopg.connect(DSN) as conn:
        conn.execute("INSERT INTO naive_events (body) VALUES (%s)", (body,))
    return jsonify({"status": "accepted"}), 202


# -- drain: raw Celery -------------------------------------------------------------------

RAW_QUEUE, RAW_IDLE_QUEUE = "bench_raw", "bench_idle"
RAW_COUNTER, RAW_FINISHED = "bench:raw:done", "bench:raw:finished"
_RAW_BROKER = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/9")
raw_app = Celery("bench_raw", broker=_RAW_BROKER, set_as_current=False)
raw_app.conf.update(
    task_default_queue=RAW_QUEUE,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=int(os.environ.get("BENCH_RAW_PREFETCH", "4")),
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    broker_transport_options={"visibility_timeout": 3600},
    worker_hijack_root_logger=False,
)
_raw_client: redis.Redis | None = None


@raw_app.task(name="bench.noop")  # type: ignore[untyped-decorator]
def raw_noop(total: int) -> None:
    global _raw_client
    if _raw_client is None:  # made lazily, so each pool process has its own connection
        _raw_client = redis.Redis.from_url(_RAW_BROKER)
    if _raw_client.incr(RAW_COUNTER) == total:
        _raw_client.set(RAW_FINISHED, repr(time.time()))
