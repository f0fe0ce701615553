"""Retention reports in the database: one row per prune round and per erasure, written in
the transaction of what it reports where there is one (an erasure's)."""

from __future__ import annotations

import secrets

from sqlalchemy import Connection, text


def write(
    conn: Connection,
    kind: str,
    report: bytes,
    manifest: bytes | None,
    signature: bytes | None,
    public_id: str | None = None,
) -> str:
    """Store one report (its exact bytes, signed or not yet); its public id."""
    public_id = public_id or new_id()
    conn.execute(
        text(
            "INSERT INTO retention_reports (public_id, kind, report, manifest, signature)"
            " VALUES (:p, :k, :r, :m, :s)"
        ),
        {"p": public_id, "k": kind, "r": report, "m": manifest, "s": signature},
    )
    return public_id


def new_id() -> str:
    return "rpt_" + secrets.token_hex(8)
