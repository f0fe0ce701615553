"""The stored signing secrets as a whole, as startup and the CLI check them: how many,
a few to try the key on, how many are still in clear."""

from __future__ import annotations

from sqlalchemy import Connection, text

from inbox.infra.keyring import is_encrypted

# The tables that hold signing secrets (names of ours, never input).
TABLES = ("source_secrets", "endpoint_secrets")


def encrypted_count(conn: Connection) -> int | None:
    """Active (unrevoked) stored secrets, of sources and endpoints; None before the schema
    is migrated (no tables yet)."""
    found = conn.execute(
        text("SELECT count(to_regclass(t)) FROM unnest(CAST(:names AS text[])) t"),
        {"names": list(TABLES)},
    ).scalar_one()
    if found < len(TABLES):
        return None
    n = 0
    for table in TABLES:
        n += conn.execute(
            text(f"SELECT count(*) FROM {table} WHERE revoked_at IS NULL")
        ).scalar_one()
    return int(n)


def sample(conn: Connection, limit: int = 5) -> list[str]:
    """The newest few active secrets of each table, to try the key on."""
    out: list[str] = []
    for table in TABLES:
        rows = conn.execute(
            text(f"SELECT secret FROM {table} WHERE revoked_at IS NULL ORDER BY id DESC LIMIT :n"),
            {"n": limit},
        )
        out += [r.secret for r in rows]
    return out


def clear_count(conn: Connection) -> int:
    """Secrets stored in clear (none, once migrated)."""
    n = 0
    for table in TABLES:
        for (secret,) in conn.execute(text(f"SELECT secret FROM {table}")):
            n += 0 if is_encrypted(secret) else 1
    return n
