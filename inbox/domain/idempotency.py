"""Idempotency keys: validation and the digests that are stored instead of them.

No key, provider event id or business key is ever stored in clear: the tables
hold SHA-256 digests over (tenant, source, value), so integrators who put phone
numbers or e-mail addresses in keys leave none in the database, and tenant A's
key can never match tenant B's.
"""

from __future__ import annotations

import functools
import hashlib

from inbox.domain.errors import BadRequest

MAX_KEY_LENGTH = 255


def validate_key(raw: str) -> str:
    """Check an ``Idempotency-Key`` header: 1-255 printable ASCII characters."""
    if not raw:
        raise BadRequest("Idempotency-Key must not be empty.")
    if len(raw) > MAX_KEY_LENGTH:
        raise BadRequest(f"Idempotency-Key is longer than {MAX_KEY_LENGTH} characters.")
    if not (raw.isascii() and raw.isprintable()):  # ASCII printable: " " to "~"
        raise BadRequest("Idempotency-Key must be printable ASCII.")
    if "," in raw:
        # HTTP joins repeated headers with commas, so two Idempotency-Key headers arrive as
        # one "a,b" (or "a, b"): which one was meant cannot be known, and joining them
        # would make a key neither copy used.
        raise BadRequest(
            "Idempotency-Key was sent more than once or holds a comma; send one key, no commas."
        )
    return raw


def _framed(parts: tuple[str | int, ...]) -> bytes:
    """The parts, each length-prefixed, so no two different tuples frame alike."""
    chunks = []
    for part in parts:
        data = str(part).encode("utf-8", "surrogatepass")
        chunks.append(len(data).to_bytes(4, "big"))
        chunks.append(data)
    return b"".join(chunks)


def _digest(*parts: str | int) -> bytes:
    """SHA-256 over length-prefixed parts, so no two different tuples collide."""
    return hashlib.sha256(_framed(parts)).digest()


@functools.lru_cache(maxsize=1024)
def _key_prefix(tenant_id: int, source_id: int) -> bytes:
    return _framed(("key", tenant_id, source_id))


def key_digest(tenant_id: int, source_id: int, key: str) -> bytes:
    """The stored form of a dedup key: unique per tenant and source (``_digest`` of
    ("key", tenant, source, key), its first three parts framed once per source)."""
    return hashlib.sha256(_key_prefix(tenant_id, source_id) + _framed((key,))).digest()


def body_key_digest(tenant_id: int, source_id: int, digest: bytes) -> bytes:
    """The dedup key of a delivery that carries no key or id of its own: its body's
    identity digest, per tenant and source, framed apart from every ``key_digest``."""
    return _digest("body", tenant_id, source_id, digest.hex())


def business_key_digest(tenant_id: int, values: list[str]) -> bytes:
    """The stored form of a business key (one or more values taken from the body).

    Scoped to the tenant only: the same business fact arriving through two of a
    tenant's sources is the same fact.
    """
    return _digest("bk", tenant_id, *values)


def subject_digest(tenant_id: int, subject: str) -> bytes:
    """The stored form of a payload's subject (the account or person a source's
    ``subject_path`` names): scoped to the tenant, never kept in clear."""
    return _digest("subject", tenant_id, subject)


def body_sha256(body: bytes) -> bytes:
    return hashlib.sha256(body).digest()
