"""Payloads sealed at rest: AES-256-GCM under data keys, the data keys wrapped by the KEK.

Envelope encryption: each tenant (or subject, ``inbox.domain.erasure``) has a random
256-bit data key; a payload column holds ``VERSION || nonce (12 bytes) || ciphertext+tag``
sealed under it with ``cryptography``'s AESGCM; the data key is stored only wrapped by
``INBOX_KEK`` (the keyring's MultiFernet, ``inbox.infra.keyring``), so rotating the KEK
rewraps the keys and never touches a payload. Destroying a wrapped key (erasure) leaves
every copy of the payloads sealed under it unreadable, backups and dumps included.

The associated data names the column and the key's id: a sealed value moved to another
column or relabelled with another key does not open. A nonce is 96 random bits per seal:
a key seals far fewer than the 2^32 values NIST SP 800-38D allows for random nonces
before a subject's or a tenant's traffic would have to be rekeyed (a tenant's key can be
retired by erasure's successor, a fresh key, at any time).
"""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESGCMSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from inbox.domain.errors import InboxError
from inbox.infra.keyring import Keyring

VERSION = b"\x01"
NONCE_BYTES = 12
OVERHEAD = len(VERSION) + NONCE_BYTES + 16  # the tag
# A value that names its own key (``seal_tagged``): TAGGED || key id (8 bytes) || nonce ||
# ciphertext+tag. A JSON document never starts with this byte, so a column may hold both.
TAGGED = b"\x02"
KEY_ID_BYTES = 8
TAGGED_OVERHEAD = len(TAGGED) + KEY_ID_BYTES + NONCE_BYTES + 16


class SealBroken(InboxError):
    """A sealed value does not open under its key (tampered, or the wrong key)."""


class DataKey:
    """One unwrapped data key, ready to seal and open (thread-safe: AESGCM is)."""

    __slots__ = ("_aead", "_siv", "id")

    def __init__(self, key_id: int, key: bytes) -> None:
        self.id = key_id
        self._aead = AESGCM(key)
        # The deterministic AEAD of ``seal_tagged``: AES-GCM-SIV (RFC 8452) under a subkey
        # derived from the data key (one key, one algorithm), so erasing the data key
        # erases these values too.
        sub = HKDF(hashes.SHA256(), 32, None, b"inbox tagged values").derive(key)
        self._siv = AESGCMSIV(sub)

    def _aad(self, column: str) -> bytes:
        return f"{column}:{self.id}".encode()

    def seal(self, plain: bytes, column: str) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return VERSION + nonce + self._aead.encrypt(nonce, plain, self._aad(column))

    def open(self, sealed: bytes, column: str) -> bytes:
        if sealed[:1] != VERSION or len(sealed) < OVERHEAD:
            raise SealBroken(f"{column}: not a sealed value")
        nonce = sealed[1 : 1 + NONCE_BYTES]
        try:
            return self._aead.decrypt(nonce, sealed[1 + NONCE_BYTES :], self._aad(column))
        except InvalidTag:
            raise SealBroken(f"{column}: does not open under key {self.id}") from None

    def seal_tagged(self, plain: bytes, column: str, label: str) -> bytes:
        """``plain`` sealed deterministically, naming this key: the same ``label`` (a row's
        public id) and plaintext give the same bytes, so a check that compares two copies
        of a row still can; the nonce is derived from the label, and AES-GCM-SIV keeps a
        repeated nonce from revealing more than that the two plaintexts are equal."""
        nonce = hashlib.sha256(label.encode()).digest()[:NONCE_BYTES]
        head = TAGGED + self.id.to_bytes(KEY_ID_BYTES, "big")
        return head + nonce + self._siv.encrypt(nonce, plain, self._aad(column))

    def open_tagged(self, sealed: bytes, column: str) -> bytes:
        start = len(TAGGED) + KEY_ID_BYTES
        nonce = sealed[start : start + NONCE_BYTES]
        try:
            return self._siv.decrypt(nonce, sealed[start + NONCE_BYTES :], self._aad(column))
        except InvalidTag:
            raise SealBroken(f"{column}: does not open under key {self.id}") from None


def tagged_key(value: bytes) -> int | None:
    """The key id a ``seal_tagged`` value names; None for a value stored in clear."""
    if value[:1] != TAGGED or len(value) < TAGGED_OVERHEAD:
        return None
    return int.from_bytes(value[len(TAGGED) : len(TAGGED) + KEY_ID_BYTES], "big")


def new_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


def wrap(ring: Keyring, key: bytes) -> str:
    """The data key as stored: encrypted under the newest KEK (``fernet:...``)."""
    return ring.encrypt(base64.b64encode(key).decode())


def unwrap(ring: Keyring, wrapped: str) -> bytes:
    """The data key of a stored wrapped value (any KEK listed opens it)."""
    return base64.b64decode(ring.decrypt(wrapped))
