"""The stored signing secrets as a whole, as startup and the CLI check them: how many,
a few to try the key on, how many are still in clear."""

from __future__ import annotations

from sqlalchemy import Connection, Table, func, inspect, select

from inbox.infra.keyring import is_encrypted
from inbox.store.schema.tables import endpoint_secrets, source_secrets

TABLES: tuple[Table, ...] = (source_secrets, endpoint_secrets)


def encrypted_count(conn: Connection) -> int | None:
    """Active (unrevoked) stored secrets, of sources and endpoints; None before the schema
    is migrated (no tables yet)."""
    if not all(inspect(conn).has_table(t.name) for t in TABLES):
        return None
    n = 0
    for table in TABLES:
        n += conn.execute(
            select(func.count()).select_from(table).where(table.c.revoked_at.is_(None))
        ).scalar_one()
    return int(n)


def sample(conn: Connection, limit: int = 5) -> list[str]:
    """The newest few active secrets of each table, to try the key on."""
    out: list[str] = []
    for table in TABLES:
        rows = conn.execute(
            select(table.c.secret)
            .where(table.c.revoked_at.is_(None))
            .order_by(table.c.id.desc())
            .limit(limit)
        )
        out += [r.secret for r in rows]
    return out


def clear_count(conn: Connection) -> int:
    """Secrets stored in clear (none, once migrated)."""
    n = 0
    for table in TABLES:
        for (secret,) in conn.execute(select(table.c.secret)):
            n += 0 if is_encrypted(secret) else 1
    return n
