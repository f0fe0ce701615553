"""Erasure in the database: destroy payload keys, keep every row, digest, verdict and audit.

A subject's erasure runs at once; a tenant-wide one waits for a second operator (the
requester can never confirm it: ``inbox.domain.approval.check_reviewer``). Running one, in
one transaction: ``legal_holds`` locked in SHARE mode (a hold placed at the same moment
is either seen or waits), the keys locked, refused (409, naming the holds) while an active
hold covers an event under them, refused while such an event is unfinished; then each key's
registry row is marked destroyed (when, by whom, by which erasure) and the erasure becomes
``destroying``: from that commit on every reader finds the payloads erased. The keys
themselves live in the key store (``inbox.store.db.keystore``): the use case deletes them
there after this commit, then ``finish`` marks the erasure done and writes the
``audit_log`` row (``inbox.services.erasure``, which resumes an erasure a crash left in
``destroying``). Nothing else changes: events keep their sealed bytes, which no key opens
any more, in the database or in any copy of it.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain import holds as hold_rules
from inbox.domain.approval import check_reviewer
from inbox.domain.erasure import (
    Erasure,
    ErasureHeld,
    ErasureNotAwaiting,
    ErasureScope,
    ErasureUnfinished,
    needs_two_people,
    subject_digest,
)
from inbox.domain.errors import BadRequest, NotFound
from inbox.domain.records import TenantId
from inbox.store.reads import erasures as reads
from inbox.store.reads.sources import get_tenant
from inbox.store.write.redaction import UNFINISHED

_KEYS = text(
    "SELECT id FROM data_keys WHERE tenant_id = :t AND destroyed_at IS NULL"
    " AND (CAST(:s AS bytea) IS NULL OR subject_digest = :s) ORDER BY id FOR UPDATE"
)
# The active holds that cover an event sealed under one of the keys (a tenant-wide hold
# covers them all). Each scope probes the index its column has.
_HOLDING = text(
    """
    SELECT h.public_id FROM legal_holds h
     WHERE h.released_at IS NULL AND h.tenant_id = :t
       AND (h.scope = 'tenant'
            OR EXISTS (SELECT 1 FROM events e
                        WHERE e.tenant_id = h.tenant_id AND e.key_id = ANY(:keys)
                          AND ((h.scope = 'source' AND e.source_id = h.source_id)
                               OR (h.scope = 'business_key'
                                   AND e.business_key_digest = h.business_key_digest)
                               OR (h.scope = 'event' AND e.id = h.event_id))))
     ORDER BY h.id
    """
)
_UNFINISHED = text(
    "SELECT count(*) FROM events WHERE tenant_id = :t AND key_id = ANY(:keys)"
    " AND state = ANY(:states)"
)
_EVENTS = text("SELECT count(*) FROM events WHERE tenant_id = :t AND key_id = ANY(:keys)")
_DESTROY = text(
    "UPDATE data_keys SET destroyed_at = now(), destroyed_by = :a,"
    " erasure_id = :x WHERE id = ANY(:keys)"
)
_DESTROYED = text("SELECT id FROM data_keys WHERE erasure_id = :x ORDER BY id")


def _audit(conn: Connection, actor: str, action: str, erasure: Erasure, **extra: Any) -> None:
    detail = {**erasure.public(), **extra}
    conn.execute(
        text(
            "INSERT INTO audit_log (actor, action, subject_kind, subject_id, detail)"
            " VALUES (:a, :act, 'erasure', :id, CAST(:d AS jsonb))"
        ),
        {"a": actor, "act": action, "id": erasure.id, "d": json.dumps(detail, sort_keys=True)},
    )


def request(
    conn: Connection,
    tenant: str,
    actor: str,
    reason: str,
    *,
    subject: str | None = None,
    scope: TenantId | None = None,
) -> tuple[Erasure, set[int]]:
    """Erase a subject's payloads now, or ask for a tenant-wide erasure (``subject`` None),
    which waits for a second operator. Returns the erasure and the keys destroyed."""
    if not reason.strip() or len(reason) > hold_rules.MAX_REASON:
        raise BadRequest(f"An erasure needs a reason (1-{hold_rules.MAX_REASON} characters).")
    if subject is not None and not subject.strip():
        raise BadRequest("A subject erasure needs the subject's value.")
    t = get_tenant(conn, tenant)
    if scope is not None and t.id != scope:
        raise NotFound(f"No tenant {tenant!r}.")
    kind = ErasureScope.TENANT if subject is None else ErasureScope.SUBJECT
    digest = None if subject is None else subject_digest(t.id, subject)
    erasure_id = conn.execute(
        text(
            "INSERT INTO erasures (public_id, tenant_id, scope, subject_digest, reason, status,"
            " requested_by) VALUES (:p, :t, :scope, :s, :reason, 'awaiting_approval', :a)"
            " RETURNING id"
        ),
        {
            "p": "era_" + secrets.token_hex(8),
            "t": t.id,
            "scope": kind.value,
            "s": digest,
            "reason": reason,
            "a": actor,
        },
    ).scalar_one()
    asked = reads.by_id(conn, erasure_id)
    assert asked is not None
    _audit(conn, actor, "erasure_requested", asked)
    if needs_two_people(kind):
        _check(conn, asked, t.id, digest)  # a hold refuses the request itself, too
        return asked, set()
    return _run(conn, asked, t.id, digest, actor, approved_by=None)


def review(
    conn: Connection, public_id: str, actor: str, *, approve: bool, scope: TenantId | None = None
) -> tuple[Erasure, set[int]]:
    """A second operator confirms (the keys are destroyed) or rejects a tenant-wide erasure."""
    found = reads.get(conn, public_id, scope)
    if found is None:
        raise NotFound(f"No erasure {public_id!r}.")
    row = conn.execute(
        text("SELECT tenant_id, subject_digest, status FROM erasures WHERE id = :id FOR UPDATE"),
        {"id": found.id},
    ).one()
    if row.status != "awaiting_approval":
        raise ErasureNotAwaiting()
    check_reviewer(found.requested_by, actor, approve)
    if not approve:
        conn.execute(
            text("UPDATE erasures SET status = 'rejected', done_at = now() WHERE id = :id"),
            {"id": found.id},
        )
        done = reads.by_id(conn, found.id)
        assert done is not None
        _audit(conn, actor, "erasure_rejected", done)
        return done, set()
    digest = None if row.subject_digest is None else bytes(row.subject_digest)
    return _run(conn, found, row.tenant_id, digest, actor, approved_by=actor)


def _check(
    conn: Connection, erasure: Erasure, tenant_id: TenantId, digest: bytes | None
) -> list[int]:
    """The live keys the erasure covers, locked; raises ErasureHeld or ErasureUnfinished."""
    conn.execute(text("LOCK TABLE legal_holds IN SHARE MODE"))
    keys = [int(k) for k in conn.execute(_KEYS, {"t": tenant_id, "s": digest}).scalars()]
    params = {"t": tenant_id, "keys": keys}
    held_by = [str(h) for h in conn.execute(_HOLDING, params).scalars()]
    if held_by and (keys or erasure.scope == ErasureScope.TENANT):
        raise ErasureHeld(
            f"Erasure {erasure.public_id} is refused: legal hold {', '.join(held_by)} covers"
            " payloads it would erase; release the hold first.",
            holds=held_by,
        )
    unfinished = int(conn.execute(_UNFINISHED, {**params, "states": list(UNFINISHED)}).scalar_one())
    if unfinished:
        raise ErasureUnfinished(
            f"Erasure {erasure.public_id} is refused: {unfinished} event(s) under its keys are"
            " not finished (the worker still needs their bodies); try again once they are.",
            unfinished=unfinished,
        )
    return keys


def _run(
    conn: Connection,
    erasure: Erasure,
    tenant_id: TenantId,
    digest: bytes | None,
    actor: str,
    approved_by: str | None,
) -> tuple[Erasure, set[int]]:
    keys = _check(conn, erasure, tenant_id, digest)
    conn.execute(
        text("UPDATE erasures SET status = 'destroying', approved_by = :b WHERE id = :id"),
        {"b": approved_by, "id": erasure.id},
    )
    if not keys:  # nothing to delete in the key store: done at once
        return _done(conn, erasure.id, actor, [])
    conn.execute(_DESTROY, {"t": tenant_id, "keys": keys, "a": actor, "x": erasure.id})
    marked = reads.by_id(conn, erasure.id)
    assert marked is not None
    return marked, set(keys)


def pending(conn: Connection) -> list[tuple[int, set[int]]]:
    """The erasures left ``destroying`` (by a crash, or a key store that did not answer),
    each with its keys."""
    ids = conn.execute(
        text("SELECT id FROM erasures WHERE status = 'destroying' ORDER BY id")
    ).scalars()
    return [(int(x), {int(k) for k in conn.execute(_DESTROYED, {"x": x}).scalars()}) for x in ids]


def finish(conn: Connection, erasure_id: int) -> tuple[Erasure, set[int]] | None:
    """Mark a ``destroying`` erasure done once its keys are gone from the key store, with its
    audit row; None where it is not ``destroying`` (another process finished it)."""
    row = conn.execute(
        text(
            "SELECT requested_by, approved_by FROM erasures"
            " WHERE id = :id AND status = 'destroying' FOR UPDATE"
        ),
        {"id": erasure_id},
    ).first()
    if row is None:
        return None
    keys = [int(k) for k in conn.execute(_DESTROYED, {"x": erasure_id}).scalars()]
    return _done(conn, erasure_id, row.approved_by or row.requested_by, keys)


def _done(
    conn: Connection, erasure_id: int, actor: str, keys: list[int]
) -> tuple[Erasure, set[int]]:
    tenant_id = conn.execute(
        text("SELECT tenant_id FROM erasures WHERE id = :id"), {"id": erasure_id}
    ).scalar_one()
    events = int(conn.execute(_EVENTS, {"t": tenant_id, "keys": keys}).scalar_one()) if keys else 0
    conn.execute(
        text(
            "UPDATE erasures SET status = 'done', done_at = now(),"
            " keys_destroyed = :k, events = :n WHERE id = :id"
        ),
        {"k": len(keys), "n": events, "id": erasure_id},
    )
    done = reads.by_id(conn, erasure_id)
    assert done is not None
    _audit(conn, actor, "erased", done, key_ids=keys)
    return done, set(keys)
