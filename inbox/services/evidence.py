"""Exporting and checking evidence bundles: a bundle is a directory of files.

``export`` reads each event through the read model (``inbox.store.reads.evidence``),
seals its parts with the export key (``inbox.domain.evidence``) and writes one directory
per event, named by its public id. ``load`` reads a bundle back for ``check``: nothing
here needs the database once a bundle is written.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)
from sqlalchemy import Connection

from inbox.domain import evidence
from inbox.domain.errors import BadRequest, NotFound
from inbox.services.runtime import Runtime
from inbox.store.db.errors import wrap_exceptions
from inbox.store.reads import evidence as reads
from inbox.store.reads import listing


def keygen(path: Path) -> Ed25519PublicKey:
    """Write a new export key (PEM, readable by its owner only) and its public half
    beside it (``PATH.pub``); refuse to replace an existing key."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise BadRequest(f"{path} exists: an export key is never replaced in place") from None
    except OSError as exc:
        raise BadRequest(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public = key.public_key()
    Path(f"{path}.pub").write_bytes(
        public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    return public


def load_key(path: str) -> Ed25519PrivateKey:
    if not path:
        raise BadRequest(
            "INBOX_EVIDENCE_KEY_FILE is not set: make a key with inbox evidence keygen PATH"
        )
    try:
        key = load_pem_private_key(Path(path).read_bytes(), password=None)
    except OSError as exc:
        raise BadRequest(f"cannot read the export key {path}: {exc.strerror}") from None
    except (ValueError, TypeError):
        raise BadRequest(f"{path} is not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BadRequest(f"{path} is not an Ed25519 key")
    return key


def load_public(path: Path) -> Ed25519PublicKey:
    try:
        key = load_pem_public_key(path.read_bytes())
    except OSError as exc:
        raise BadRequest(f"cannot read {path}: {exc.strerror}") from None
    except ValueError:
        raise BadRequest(f"{path} is not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BadRequest(f"{path} is not an Ed25519 public key")
    return key


def export(
    conn: Connection, public_ids: list[str], out: Path, key: Ed25519PrivateKey
) -> list[Path]:
    """One bundle per event under ``out``; every id must name an event, and no bundle
    already there is overwritten."""
    sealed: list[tuple[Path, dict[str, bytes]]] = []
    for public_id in public_ids:
        found = reads.event_evidence(conn, public_id)
        if found is None:
            raise NotFound(f"no event {public_id}")
        target = out / public_id
        if target.exists():
            raise BadRequest(f"{target} exists: a bundle is never overwritten")
        parts = evidence.parts(found.detail.public(), found.body, found.detail.verification)
        sealed.append((target, evidence.seal(parts, public_id, key)))
    for target, files in sealed:
        try:
            target.mkdir(parents=True)
            for name, data in files.items():
                (target / name).write_bytes(data)
        except OSError as exc:
            raise BadRequest(f"cannot write the bundle {target}: {exc.strerror}") from None
    return [target for target, _ in sealed]


def export_events(
    rt: Runtime,
    out: Path,
    key: Ed25519PrivateKey,
    *,
    ids: Sequence[str] = (),
    match: listing.Filter | None = None,
    limit: int = 100,
) -> list[Path]:
    """``export`` of the events ``ids`` names, or of the newest ``limit`` that ``match``
    selects, read in one transaction (``inbox events export``)."""
    with wrap_exceptions(), rt.engine.begin() as conn:
        targets = reads.matching(conn, match, limit) if match is not None else list(ids)
        return export(conn, targets, out, key)


def read_secret(path: Path) -> str:
    try:
        secret = path.read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(f"cannot read the secret from {path}: {exc}") from None
    if not secret:
        raise BadRequest(f"{path} holds no secret")
    return secret


def load(bundle: Path) -> dict[str, bytes]:
    """A bundle's files by name (a directory as ``export`` writes it)."""
    if not bundle.is_dir():
        raise BadRequest(f"{bundle} is not a bundle directory")
    try:
        return {p.name: p.read_bytes() for p in bundle.iterdir() if p.is_file()}
    except OSError as exc:
        raise BadRequest(f"cannot read the bundle {bundle}: {exc.strerror}") from None
