"""Admin API tokens: roles, the token format, and the digest that is stored instead.

A token is ``inb_`` followed by 32 random bytes (URL-safe base64). It is shown
once when created; the database keeps only its SHA-256 digest, so a leaked table
yields no usable token. Roles: a ``viewer`` reads, an ``operator`` also replays
and cancels.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from inbox.domain.records import TenantId

PREFIX = "inb_"
_RANDOM_BYTES = 32
# 32 bytes in URL-safe base64 without padding is 43 characters.
_LENGTH = len(PREFIX) + 43


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"


ROLES: tuple[str, ...] = tuple(r.value for r in Role)

# The HTTP methods that only change nothing; anything else needs an operator.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(_RANDOM_BYTES)


def digest(token: str) -> bytes:
    """The stored form of a token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def well_formed(token: str) -> bool:
    """A cheap shape check, so garbage never reaches the database."""
    if len(token) != _LENGTH or not token.startswith(PREFIX):
        return False
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
    return all(ch in alphabet for ch in token[len(PREFIX) :])


def bearer(header: str | None) -> str | None:
    """The token in an ``Authorization: Bearer <token>`` header, if there is one."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    value = value.strip()
    return value or None


def may(role: str, method: str) -> bool:
    """Whether a token with ``role`` may send a request with ``method``."""
    return method.upper() in READ_METHODS or role == Role.OPERATOR


@dataclass(frozen=True, slots=True)
class Token:
    """An API token as stored: its name, role and tenant scope, never its value."""

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
