"""Helpers shared by the schemes: header access, timestamp window, decoding, secret matching.

Each helper raises SignatureError (never a decoding error) and never puts a secret or a
signature into its message.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import re
from collections.abc import Callable, Iterable

from .base import SchemeConfig, SignatureError, SignedRequest

_DIGITS = re.compile(r"[0-9]{1,15}")
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})+")


def header(req: SignedRequest, name: str) -> str:
    """A required ASCII header value (signature material); missing or empty fails."""
    value = req.headers.get(name)
    if not value:
        raise SignatureError(f"missing header {name}")
    if not value.isascii():
        raise SignatureError(f"non-ASCII header {name}")
    return value


def optional_header(req: SignedRequest, *names: str) -> str | None:
    """The first non-empty value among ``names`` (e.g. an event id), else None."""
    for name in names:
        value = req.headers.get(name)
        if value:
            return value
    return None


def check_window(ts_text: str, now: float, tolerance: int) -> int:
    """Parse a unix-seconds timestamp and require it within ``tolerance`` of ``now``."""
    if not _DIGITS.fullmatch(ts_text):
        raise SignatureError("timestamp is not an integer")
    ts = int(ts_text)
    if abs(ts - now) > tolerance:
        raise SignatureError("timestamp outside the tolerance window")
    return ts


def decode_hex(text: str) -> bytes:
    """Strict hex decoding (no whitespace, even length)."""
    if not _HEX.fullmatch(text):
        raise SignatureError("signature is not hex")
    return bytes.fromhex(text)


def decode_b64(text: str) -> bytes:
    """Strict standard-alphabet base64 decoding."""
    if not text.isascii():
        raise SignatureError("signature is not base64")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("signature is not base64") from None


def try_decode(decode: Callable[[str], bytes], texts: Iterable[str]) -> list[bytes]:
    """Decode each candidate signature, dropping the undecodable ones."""
    out: list[bytes] = []
    for text in texts:
        try:
            out.append(decode(text))
        except SignatureError:
            continue
    return out


@functools.lru_cache(maxsize=256)
def _keyed(key: bytes, algorithm: str) -> hmac.HMAC:
    return hmac.new(key, digestmod=algorithm)


def hmac_of(key: bytes, algorithm: str, message: bytes) -> bytes:
    """HMAC of ``message``, from an HMAC keyed once per key and copied per message.

    Not ``hmac.digest``: that one-shot C call lets go of the interpreter lock for every
    message, however short; under load another thread then takes it, and each signature
    check cost the request a wait for the lock and two context switches (perf's
    sched_switch trace, bench/README.md). ``update`` lets go of it only for messages of
    2 KiB and more, where hashing costs more than the switch."""
    mac = _keyed(key, algorithm).copy()
    mac.update(message)
    return mac.digest()


def hmac_sha256(secret: str, message: bytes) -> bytes:
    return hmac_of(secret.encode("utf-8"), "sha256", message)


def hmac_sha1(secret: str, message: bytes) -> bytes:
    return hmac_of(secret.encode("utf-8"), "sha1", message)


def require_match(
    candidates: Iterable[bytes],
    cfg: SchemeConfig,
    expected: Callable[[str], bytes | list[bytes]],
) -> str:
    """Pass if any received candidate equals ``expected(secret)`` (or one of the values it
    returns) for any configured secret; return the first secret that matched.

    Empty secrets are ignored: they must never authenticate anything. Every pair is
    compared with ``hmac.compare_digest`` and the loop does not stop early.
    """
    received = list(candidates)
    if not received:
        raise SignatureError("no usable signature in the request")
    secrets = [s for s in cfg.secrets if s]
    if not secrets:
        raise SignatureError("no secret configured")
    matched: str | None = None
    for secret in secrets:
        digests = expected(secret)
        for digest in digests if isinstance(digests, list) else [digests]:
            for candidate in received:
                if hmac.compare_digest(digest, candidate) and matched is None:
                    matched = secret
    if matched is None:
        raise SignatureError("signature mismatch")
    return matched
