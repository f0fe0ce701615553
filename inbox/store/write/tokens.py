"""API tokens: create, list, revoke, and look one up by its digest."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text

from inbox.domain import tokens
from inbox.domain.errors import BadRequest, NotFound
from inbox.domain.records import TenantId


@dataclass(frozen=True)
class Token:
    id: int
    name: str
    role: str
    tenant_id: TenantId | None
    tenant: str | None
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None

    @property
    def all_tenants(self) -> bool:
        return self.tenant_id is None


_COLUMNS = """
k.id, k.name, k.role, k.tenant_id, t.name AS tenant, k.created_at, k.revoked_at, k.last_used_at
"""


def create_token(
    conn: Connection, name: str, role: str, tenant: str | None = None
) -> tuple[Token, str]:
    """Store a new token's digest; returns the token and its one-time clear value."""
    if role not in tokens.ROLES:
        raise BadRequest(f"role must be one of {', '.join(tokens.ROLES)}")
    if not name.strip():
        raise BadRequest("a token needs a name")
    tenant_id = None
    if tenant is not None:
        tenant_id = conn.execute(
            text("SELECT id FROM tenants WHERE name = :n"), {"n": tenant}
        ).scalar()
        if tenant_id is None:
            raise NotFound(f"no tenant {tenant}")
    secret = tokens.new_token()
    row = conn.execute(
        text(
            "INSERT INTO api_tokens (name, token_digest, role, tenant_id)"
            " VALUES (:n, :d, :r, :t) ON CONFLICT (name) DO NOTHING RETURNING id"
        ),
        {"n": name, "d": tokens.digest(secret), "r": role, "t": tenant_id},
    ).first()
    if row is None:
        raise BadRequest(f"a token named {name} exists already")
    return _get(conn, "k.id = :v", row.id), secret


def _get(conn: Connection, where: str, value: object) -> Token:
    row = conn.execute(
        text(
            f"SELECT {_COLUMNS} FROM api_tokens k LEFT JOIN tenants t ON t.id = k.tenant_id"
            f" WHERE {where}"
        ),
        {"v": value},
    ).one()
    return Token(**row._mapping)


def get_token(conn: Connection, token_id: int) -> Token | None:
    row = conn.execute(
        text(
            f"SELECT {_COLUMNS} FROM api_tokens k LEFT JOIN tenants t ON t.id = k.tenant_id"
            " WHERE k.id = :v"
        ),
        {"v": token_id},
    ).first()
    return Token(**row._mapping) if row is not None else None


def list_tokens(conn: Connection) -> list[Token]:
    rows = conn.execute(
        text(
            f"SELECT {_COLUMNS} FROM api_tokens k LEFT JOIN tenants t ON t.id = k.tenant_id"
            " ORDER BY k.name"
        )
    )
    return [Token(**r._mapping) for r in rows]


def revoke(conn: Connection, name: str) -> bool:
    """Revoke a token by name; False when there is no live token of that name."""
    result = conn.execute(
        text("UPDATE api_tokens SET revoked_at = now() WHERE name = :n AND revoked_at IS NULL"),
        {"n": name},
    )
    return result.rowcount == 1


def authenticate(conn: Connection, token: str) -> Token | None:
    """The live token with this value, or None. Notes when it was last used.

    ``last_used_at`` is written at most once a minute per token, so busy clients
    do not turn every read into a write.
    """
    if not tokens.well_formed(token):
        return None
    row = conn.execute(
        text(
            f"SELECT {_COLUMNS} FROM api_tokens k LEFT JOIN tenants t ON t.id = k.tenant_id"
            " WHERE k.token_digest = :d AND k.revoked_at IS NULL"
        ),
        {"d": tokens.digest(token)},
    ).first()
    if row is None:
        return None
    conn.execute(
        text(
            "UPDATE api_tokens SET last_used_at = now() WHERE id = :id"
            " AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')"
        ),
        {"id": row.id},
    )
    return Token(**row._mapping)
