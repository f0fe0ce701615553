"""The stored signing secrets as a whole: re-encryption under the newest key (the counts
and samples are ``inbox.store.reads.secrets``).

Each table is read and rewritten in one transaction, rows locked, so a secret added or
revoked meanwhile waits for it and none is rewritten from a stale value.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, select, update

from inbox.infra.keyring import Keyring, is_encrypted
from inbox.store.db import keystore
from inbox.store.reads.secrets import TABLES


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
    out.append(rewrap(ring))
    return out


def rewrap(ring: Keyring) -> Reencrypted:
    """Every payload data key in the key store wrapped under the newest KEK, in the key
    store's own transaction: the keys change wrapping, never value, so no sealed payload is
    rewritten (destroyed keys are gone). Nothing to do where no key store is set."""
    if not keystore.configured():
        return Reencrypted("data_keys (key store)", 0, 0, 0)
    done = keystore.current().rewrap(ring)
    return Reencrypted("data_keys (key store)", done.total, done.rewritten, 0)
