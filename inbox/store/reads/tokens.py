"""API tokens as the admin API and the CLI list them (never their values or digests)."""

from __future__ import annotations

from sqlalchemy import Connection, text

from inbox.domain.tokens import Token

# A token's columns, for every query that returns one (``inbox.store.write.tokens`` too).
COLUMNS = """
k.id, k.name, k.role, k.tenant_id, t.name AS tenant, k.created_at, k.revoked_at, k.last_used_at
"""


def get_token(conn: Connection, token_id: int) -> Token | None:
    row = conn.execute(
        text(
            f"SELECT {COLUMNS} FROM api_tokens k LEFT JOIN tenants t ON t.id = k.tenant_id"
            " WHERE k.id = :v"
        ),
        {"v": token_id},
    ).first()
    return Token(**row._mapping) if row is not None else None


def list_tokens(conn: Connection) -> list[Token]:
    rows = conn.execute(
        text(
            f"SELECT {COLUMNS} FROM api_tokens k LEFT JOIN tenants t ON t.id = k.tenant_id"
            " ORDER BY k.name"
        )
    )
    return [Token(**r._mapping) for r in rows]
