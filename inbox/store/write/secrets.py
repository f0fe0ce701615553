"""The stored signing secrets as a whole: re-encryption under the newest key (the counts
and samples are ``inbox.store.reads.secrets``).

Each table is read and rewritten in one transaction, rows locked, so a secret added or
revoked meanwhile waits for it and none is rewritten from a stale value.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, select, update

from inbox.infra.keyring import Keyring, is_encrypted
from inbox.store.schema.tables import data_keys, endpoint_secrets, source_secrets

# The tables that hold signing secrets (``inbox.store.reads.secrets.TABLES`` by name).
TABLES = (source_secrets, endpoint_secrets)


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
    out.append(rewrap(conn, ring))
    return out


def rewrap(conn: Connection, ring: Keyring) -> Reencrypted:
    """Every live payload data key wrapped under the newest KEK: the keys change wrapping,
    never value, so no sealed payload is rewritten (destroyed keys have nothing to wrap)."""
    rows = conn.execute(
        select(data_keys.c.id, data_keys.c.wrapped)
        .where(data_keys.c.wrapped.is_not(None))
        .order_by(data_keys.c.id)
        .with_for_update()
    ).all()
    rewritten = 0
    for row in rows:
        if ring.is_current(row.wrapped):
            continue
        conn.execute(
            update(data_keys)
            .where(data_keys.c.id == row.id)
            .values(wrapped=ring.rotate(row.wrapped))
        )
        rewritten += 1
    return Reencrypted(data_keys.name, len(rows), rewritten, 0)
