"""The baselines of bench/ingest.py: receivers a user might write instead of the inbox.

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
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import time

import psycopg
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
_CREATE_LOCK = 0x68616E64  # worker processes starting at once create the table in turn


def ensure_table(dsn: str = DSN) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_CREATE_LOCK,))
        conn.execute(_CREATE)


def _autocommit(conn: psycopg.Connection) -> None:
    conn.autocommit = True


_pool: ConnectionPool | None = None
_pool_lock = threading.Lock()


def pool() -> ConnectionPool:
    """The process's pool, opened by its first request (after the server forked)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ConnectionPool(
                DSN, min_size=POOL_SIZE, max_size=POOL_SIZE, configure=_autocommit, timeout=5
            )
            _pool.wait()
        return _pool


handwritten = Flask("handwritten")
naive = Flask("naive")
ensure_table()


def _signature_ok(ts: str, signature: str, body: bytes) -> bool:
    if not ts.isdigit() or abs(int(ts) - time.time()) > TOLERANCE_SECONDS:
        return False
    expected = hmac.new(SECRET, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


@handwritten.post("/hooks/<tenant>/<source>")
def receive(tenant: str, source: str):  # type: ignore[no-untyped-def]
    body = request.get_data()
    if not _signature_ok(
        request.headers.get("X-Timestamp", ""), request.headers.get("X-Signature", ""), body
    ):
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
    body = request.get_data()
    if not _signature_ok(
        request.headers.get("X-Timestamp", ""), request.headers.get("X-Signature", ""), body
    ):
        return jsonify({"error": "bad signature"}), 401
    with psycopg.connect(DSN) as conn:
        conn.execute("INSERT INTO naive_events (body) VALUES (%s)", (body,))
    return jsonify({"status": "accepted"}), 202
