"""Signed retention reports: what each prune (with its day drops) and each erasure removed,
by which rule or request, and what legal holds kept.

A report is one JSON document (``report.json``), sealed as an evidence bundle of its own
format (``inbox.domain.evidence.REPORT_FORMAT``): its manifest and signature by the evidence
key are made when the report is written, where the writing process has the key
(``INBOX_EVIDENCE_KEY_FILE``), else when it is exported. ``inbox evidence reports --out DIR``
writes one bundle per report; ``inbox evidence verify DIR/rpt_...`` checks it offline.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Connection

from inbox.domain import evidence as bundle
from inbox.domain.erasure import Erasure
from inbox.domain.errors import BadRequest
from inbox.domain.retention import PruneResult
from inbox.infra.config import Settings
from inbox.services import evidence
from inbox.services.runtime import Runtime
from inbox.store.db.errors import wrap_exceptions
from inbox.store.reads import holds as holds_reads
from inbox.store.reads import reports as reads
from inbox.store.write import reports as store

log = logging.getLogger(__name__)
PART = bundle.REPORT_PARTS[0]


def _key(settings: Settings) -> Ed25519PrivateKey | None:
    if not settings.evidence_key_file:
        return None
    try:
        return evidence.load_key(settings.evidence_key_file)
    except BadRequest as exc:
        log.warning("retention report: not signed now (%s); it is signed when exported", exc)
        return None


def _active_holds(conn: Connection) -> list[dict[str, Any]]:
    return [h.public() for h in holds_reads.listing(conn, None)]


def record(conn: Connection, settings: Settings, kind: str, doc: dict[str, Any]) -> str:
    """Write one report in ``conn``'s transaction (signed now where the key is here)."""
    public_id = store.new_id()
    body = {
        "report": public_id,
        "kind": kind,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        **doc,
        "holds_in_force": _active_holds(conn),
    }
    raw = json.dumps(body, sort_keys=True, indent=2, default=str).encode() + b"\n"
    key = _key(settings)
    manifest = signature = None
    if key is not None:
        sealed = bundle.seal({PART: raw}, public_id, key, bundle.REPORT_FORMAT)
        manifest, signature = sealed[bundle.MANIFEST], sealed[bundle.SIGNATURE]
    return store.write(conn, kind, raw, manifest, signature, public_id)


def prune_report(result: PruneResult, settings: Settings, rules: dict[str, Any]) -> dict[str, Any]:
    """What a prune round removed and kept, and the rules it applied."""
    return {
        "removed": {
            "keys": result.keys_removed,
            "bodies": result.bodies_removed,
            "delivery_attempts": result.attempts_folded,
            "days": result.days_dropped,
        },
        "kept": {
            "bodies_under_legal_hold": result.bodies_held,
            "days": result.days_kept,
            "sources_whose_keys_were_kept": result.refused_sources,
        },
        "rules": {
            "ledger_retention_days": settings.ledger_retention_days,
            "ledger_window_note": result.ledger_window_note,
            "sources": rules,
        },
    }


def erasure_report(done: Erasure, key_ids: set[int]) -> dict[str, Any]:
    """What an erasure destroyed, at whose request."""
    return {"erasure": done.public(), "data_keys_destroyed": sorted(key_ids)}


def export(conn: Connection, out: Path, key: Ed25519PrivateKey, kind: str | None) -> list[Path]:
    """One bundle per report under ``out`` (signed now where it was not yet); a bundle
    already there is left as it is (reports never change)."""
    written: list[Path] = []
    for r in reads.listing(conn, kind):
        target = out / r.public_id
        if target.exists():
            continue
        if r.manifest is not None and r.signature is not None:
            files = {PART: r.report, bundle.MANIFEST: r.manifest, bundle.SIGNATURE: r.signature}
        else:
            files = bundle.seal({PART: r.report}, r.public_id, key, bundle.REPORT_FORMAT)
        try:
            target.mkdir(parents=True)
            for name, data in files.items():
                (target / name).write_bytes(data)
        except OSError as exc:
            raise BadRequest(f"cannot write the report {target}: {exc.strerror}") from None
        written.append(target)
    return written


def export_all(rt: Runtime, out: Path, key: Ed25519PrivateKey, kind: str | None) -> list[Path]:
    """``export`` in a transaction of its own (``inbox evidence reports``)."""
    with wrap_exceptions(), rt.engine.begin() as conn:
        return export(conn, out, key, kind)


__all__ = ["erasure_report", "export", "export_all", "prune_report", "record"]
