"""Signing secrets encrypted at rest: a key-encryption key (KEK) from the environment.

``INBOX_KEK`` holds one or more Fernet keys, comma-separated, newest first. New secrets
are encrypted with the first; any listed key decrypts; ``inbox secrets reencrypt``
rewrites every stored secret under the first key, after which an old key can be dropped.

Why Fernet (``cryptography``'s MultiFernet) rather than AES-GCM by hand: it is authenticated
encryption (AES-128-CBC + HMAC-SHA256) with the nonce, version and key choice built in, and
MultiFernet does rotation (``rotate``) itself. With AES-GCM we would have to build the
nonce handling, the framing and key identification ourselves, which is exactly the home-made
construction a reviewer would ask us not to write. The cost (a few tens of microseconds per
decryption) is paid when the route cache loads a source, not per request.

Stored values read ``fernet:<token>``; the prefix says how a value was stored, so the
migration and the re-encrypt command can tell an encrypted value from a clear one.

Without ``INBOX_KEK`` nothing that needs a secret works: no clear fallback. For a
development machine, ``inbox secrets keygen`` prints a key (``make run`` keeps one in
``.data/``); ``dev_key`` makes and keeps one in a file.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from inbox.domain.errors import Unavailable
from inbox.infra import config
from inbox.infra.logs import Explanation

log = logging.getLogger(__name__)
PREFIX = "fernet:"
ENV = "INBOX_KEK"


class SecretsLocked(Unavailable):
    """A 503 to a client (nothing is stored, the sender retries), with the operator's reason
    in the log and the CLI, never in the answer."""

    _logged_at = 0.0

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message)
        self.message = " ".join(self.message.split())  # one line, for the log and the CLI
        now = time.monotonic()
        if now - SecretsLocked._logged_at > 60:  # once a minute, not once per request
            SecretsLocked._logged_at = now
            log.error(
                "signing secrets: %s",
                Explanation(self.message),
                extra={"error_class": type(self).__name__, "setting": ENV},
            )

    def body(self) -> dict[str, object]:
        return Unavailable().body()


class KeyMissing(SecretsLocked):
    """INBOX_KEK is not set: signing secrets cannot be read or stored. Make a key with
    `inbox secrets keygen` and set INBOX_KEK (the same in every process)."""


class KeyInvalid(SecretsLocked):
    """A stored signing secret does not decrypt with any key in INBOX_KEK."""


class Keyring:
    def __init__(self, keys: list[str]) -> None:
        if not keys:
            raise KeyMissing()
        try:
            self._fernets = [Fernet(k.encode()) for k in keys]
        except ValueError as exc:
            raise ValueError(f"{ENV}: each key is 32 url-safe base64-encoded bytes") from exc
        self._multi = MultiFernet(self._fernets)

    def encrypt(self, plain: str) -> str:
        return PREFIX + self._multi.encrypt(plain.encode()).decode()

    def decrypt(self, stored: str) -> str:
        if not is_encrypted(stored):
            raise KeyInvalid("A stored signing secret is in clear: run `inbox migrate`.")
        try:
            return self._multi.decrypt(stored[len(PREFIX) :].encode()).decode()
        except InvalidToken:
            raise KeyInvalid() from None

    def rotate(self, stored: str) -> str:
        """``stored`` under the newest key (a clear value is encrypted)."""
        if not is_encrypted(stored):
            return self.encrypt(stored)
        try:
            return PREFIX + self._multi.rotate(stored[len(PREFIX) :].encode()).decode()
        except InvalidToken:
            raise KeyInvalid() from None

    def is_current(self, stored: str) -> bool:
        """Encrypted under the newest key already."""
        if not is_encrypted(stored):
            return False
        try:
            self._fernets[0].decrypt(stored[len(PREFIX) :].encode())
        except InvalidToken:
            return False
        return True


def is_encrypted(stored: str) -> bool:
    return stored.startswith(PREFIX)


def parse_keys(raw: str) -> list[str]:
    return [k.strip() for k in raw.split(",") if k.strip()]


_lock = threading.Lock()
_cached: tuple[str, Keyring] | None = None


def keyring() -> Keyring:
    """The keyring of ``INBOX_KEK`` as it is now (rebuilt when the setting changes)."""
    global _cached
    raw: str = config.settings().kek
    cached = _cached
    if cached is not None and cached[0] == raw:
        return cached[1]
    with _lock:
        ring = Keyring(parse_keys(raw))
        _cached = (raw, ring)
        return ring


def configured() -> bool:
    """Whether ``INBOX_KEK`` names at least one key."""
    return bool(parse_keys(config.settings().kek))


def new_key() -> str:
    return Fernet.generate_key().decode()


def dev_key(path: Path) -> str:
    """A key kept in ``path`` (made on first use, mode 0600): for development only."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(new_key())
    return path.read_text().strip()
