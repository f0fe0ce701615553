"""API tokens: create, revoke, and look one up by its digest (``inbox.store.reads.tokens``
lists them)."""

from __future__ import annotations

from sqlalchemy import Connection, text

from inbox.domain import tokens
from inbox.domain.errors import BadRequest, NotFound
from inbox.domain.tokens import Token
from inbox.store.reads.tokens import COLUMNS, get_token


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
    token = get_token(conn, row.id)
    assert token is not None  # inserted just now, in this transaction
    return token, secret


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
            f"SELECT {COLUMNS} FROM api_tokens k LEFT JOIN tenants t ON t.id = k.tenant_id"
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
