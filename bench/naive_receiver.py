"""A naive webhook receiver, written the way a typical integrator writes one.

This is the baseline the benchmark compares Webhook Inbox against. It does the least a
receiver can do and still be called correct-ish:

- one Flask route, ``POST /hooks/<tenant>/<source>``;
- one HMAC check of the ``hmac`` scheme (``X-Signature`` = hex HMAC-SHA256 over
  ``{X-Timestamp}.{body}``, compared in constant time, timestamp within 300 s);
- one INSERT of the raw body into its own table, ``naive_events``;
- a 202 answer.

It deliberately opens a new psycopg connection per request
(``with psycopg.connect(DSN) as conn:``), because that is what naive code does: no pool,
no idempotency contract (a redelivered event is stored again), no size limit, no headers
kept, no error mapping (a database failure is a 500).

Configuration comes from the environment: ``DATABASE_URL`` (a libpq URL) and
``NAIVE_SECRET`` (default ``benchsecret``). Run it with
``PYTHONPATH=bench python -m web --app naive_receiver:app``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time

import psycopg
from flask import Flask, jsonify, request

DSN = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SECRET = os.environ.get("NAIVE_SECRET", "benchsecret").encode()
TOLERANCE_SECONDS = 300

_CREATE = """
CREATE TABLE IF NOT EXISTS naive_events (
    id bigserial PRIMARY KEY,
    body bytea,
    received_at timestamptz DEFAULT now()
)
"""
# Serialises CREATE TABLE IF NOT EXISTS across worker processes starting at once
# (concurrent creators can otherwise collide on the catalog's unique indexes).
_CREATE_LOCK = 0x6E616976


def ensure_table(dsn: str = DSN) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_CREATE_LOCK,))
        conn.execute(_CREATE)


app = Flask(__name__)
ensure_table()


def _signature_ok(ts: str, signature: str, body: bytes) -> bool:
    if not ts.isdigit() or abs(int(ts) - time.time()) > TOLERANCE_SECONDS:
        return False
    expected = hmac.new(SECRET, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


@app.post("/hooks/<tenant>/<source>")
def receive(tenant: str, source: str):  # type: ignore[no-untyped-def]
    body = request.get_data()
    ts = request.headers.get("X-Timestamp", "")
    signature = request.headers.get("X-Signature", "")
    if not _signature_ok(ts, signature, body):
        return jsonify({"error": "bad signature"}), 401
    with psycopg.connect(DSN) as conn:
        conn.execute("INSERT INTO naive_events (body) VALUES (%s)", (body,))
    return jsonify({"status": "accepted"}), 202
