"""The stored digests of keys never change: rows written by an older version must still be
found by the next (a changed digest would let a retry through as a new event)."""

from __future__ import annotations

import hashlib

from inbox.domain.idempotency import business_key_digest, key_digest


def _framed(*parts: bytes) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def test_a_key_digest_is_sha256_of_its_framed_parts() -> None:
    for tenant, source, key in [(1, 3, "k1"), (7, 12345678901, "évt-ü"), (2, 2, "a" * 255)]:
        want = hashlib.sha256(
            _framed(b"key", str(tenant).encode(), str(source).encode(), key.encode())
        ).digest()
        assert key_digest(tenant, source, key) == want
    # one source's digests never match another's, nor another tenant's
    assert len({key_digest(1, 23, "k"), key_digest(12, 3, "k"), key_digest(1, 2, "3k")}) == 3


def test_a_business_key_digest_is_scoped_to_the_tenant() -> None:
    want = hashlib.sha256(_framed(b"bk", b"4", b"+15550100", b"")).digest()
    assert business_key_digest(4, ["+15550100", ""]) == want
