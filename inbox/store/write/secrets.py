"""The stored signing secrets: a source's or an endpoint's added and revoked (one way for
both), and all of them re-encrypted under the newest key (the counts and samples are
``inbox.store.reads.secrets``).

Each table is read and rewritten in one transaction, rows locked, so a secret added or
revoked meanwhile waits for it and none is rewritten from a stale value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Column, Connection, Table, func, insert, select, update

from inbox.domain.records import EndpointId, SourceId
from inbox.infra.keyring import Keyring, is_encrypted, keyring
from inbox.store.db import keystore
from inbox.store.schema.tables import endpoint_secrets, source_secrets

# The tables that hold signing secrets (``inbox.store.reads.secrets.TABLES`` by name).
TABLES = (source_secrets, endpoint_secrets)

Owner = Literal["source", "endpoint"]


def _of(owner: Owner) -> tuple[Table, Column[int]]:
    table = source_secrets if owner == "source" else endpoint_secrets
    return table, table.c.source_id if owner == "source" else table.c.endpoint_id


def add(conn: Connection, owner: Owner, owner_id: SourceId | EndpointId, secret: str) -> None:
    """A new active secret of the source or endpoint ``owner_id``, stored encrypted."""
    table, column = _of(owner)
    conn.execute(insert(table).values({column.name: owner_id, "secret": keyring().encrypt(secret)}))


def revoke_all_except(
    conn: Connection, owner: Owner, owner_id: SourceId | EndpointId, keep: str
) -> int:
    """End a rotation: every active secret but ``keep`` stops signing or verifying; how many
    did. (Encryption is randomised, so the values are compared decrypted, not in SQL.)"""
    table, column = _of(owner)
    ring = keyring()
    rows = conn.execute(
        select(table.c.id, table.c.secret).where(column == owner_id, table.c.revoked_at.is_(None))
    ).all()
    ids = [r.id for r in rows if ring.decrypt(r.secret) != keep]
    if ids:
        conn.execute(update(table).where(table.c.id.in_(ids)).values(revoked_at=func.now()))
    return len(ids)


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
