"""The stored signing secrets as a whole: re-encryption under the newest key.

Each table is read and rewritten in one transaction, rows locked, so a secret added or
revoked meanwhile waits for it and none is rewritten from a stale value.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Table, func, inspect, select, update

from inbox.infra.keyring import Keyring, is_encrypted
from inbox.store.schema.tables import endpoint_secrets, source_secrets

TABLES: tuple[Table, ...] = (source_secrets, endpoint_secrets)


@dataclass(frozen=True)
class Reencrypted:
    table: str
    total: int
    rewritten: int
    was_clear: int


def reencrypt(conn: Connection, ring: Keyring) -> list[Reencrypted]:
    """Every secret, revoked ones too, under the newest key; clear values encrypted."""
    out = []
    for table in TABLES:
        rows = conn.execute(
            select(table.c.id, table.c.secret).order_by(table.c.id).with_for_update()
        ).all()
        rewritten = clear = 0
        for row in rows:
            if ring.is_current(row.secret):
                continue
            clear += 0 if is_encrypted(row.secret) else 1
            conn.execute(
                update(table).where(table.c.id == row.id).values(secret=ring.rotate(row.secret))
            )
            rewritten += 1
        out.append(Reencrypted(table.name, len(rows), rewritten, clear))
    return out


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
