"""encrypt the signing secrets at rest

Every source and endpoint secret still in clear is encrypted with the first key of
INBOX_KEK (inbox/infra/keyring.py). With clear secrets stored and no INBOX_KEK set, the
upgrade stops and says so, rather than leave them in clear. Downgrade decrypts them.

Revision ID: 0010_encrypt_secrets
Revises: 0009_event_attempts
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_encrypt_secrets"
down_revision = "0009_event_attempts"
branch_labels = None
depends_on = None

TABLES = ("source_secrets", "endpoint_secrets")


def _clear_rows(conn: sa.Connection, table: str) -> list[sa.Row[tuple[int, str]]]:
    return list(
        conn.execute(
            sa.text(f"SELECT id, secret FROM {table} WHERE secret NOT LIKE 'fernet:%' FOR UPDATE")
        )
    )


def upgrade() -> None:
    _encrypt_clear_rows()
    for table in TABLES:  # from now on the database itself refuses a clear secret
        op.create_check_constraint(op.f(f"ck_{table}_encrypted"), table, "secret LIKE 'fernet:%'")


def _encrypt_clear_rows() -> None:
    from inbox.infra.keyring import KeyMissing, keyring

    conn = op.get_bind()
    pending = {table: _clear_rows(conn, table) for table in TABLES}
    if not any(pending.values()):
        return
    try:
        ring = keyring()
    except KeyMissing:
        raise RuntimeError(
            "Signing secrets are stored in clear and INBOX_KEK is not set: make a key with"
            " `inbox secrets keygen`, set INBOX_KEK to it, and run `inbox migrate` again."
        ) from None
    for table, rows in pending.items():
        for row in rows:
            conn.execute(
                sa.text(f"UPDATE {table} SET secret = :s WHERE id = :i"),
                {"s": ring.encrypt(row.secret), "i": row.id},
            )


def downgrade() -> None:
    from inbox.infra.keyring import keyring

    conn = op.get_bind()
    for table in TABLES:
        op.drop_constraint(op.f(f"ck_{table}_encrypted"), table, type_="check")
        rows = conn.execute(
            sa.text(f"SELECT id, secret FROM {table} WHERE secret LIKE 'fernet:%' FOR UPDATE")
        ).all()
        if rows:
            ring = keyring()
            for row in rows:
                conn.execute(
                    sa.text(f"UPDATE {table} SET secret = :s WHERE id = :i"),
                    {"s": ring.decrypt(row.secret), "i": row.id},
                )
