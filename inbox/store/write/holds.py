"""Legal holds in the database: place, release (two operators for a tenant-wide hold);
``inbox.store.reads.holds`` lists them; what a hold covers is ``inbox.store.schema.holds``'s SQL.

Every change writes an ``audit_log`` row (``subject_kind = 'legal_hold'``) in the same
transaction. The release is a conditional UPDATE, so two operators releasing at once are
serialised by the row lock and the second finds the hold released (409).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain import holds as rules
from inbox.domain.errors import BadRequest, NotFound
from inbox.domain.holds import Hold, HoldNotActive, HoldScope
from inbox.domain.idempotency import business_key_digest
from inbox.domain.records import TenantId
from inbox.store.reads import ledger_reads
from inbox.store.reads.holds import by_id, get
from inbox.store.reads.sources import get_source, get_tenant


def _audit(conn: Connection, actor: str, action: str, hold: Hold, **extra: Any) -> None:
    detail = {"public_id": hold.public_id, "scope": hold.scope, "subject": hold.subject}
    detail.update(reason=hold.reason, **extra)
    conn.execute(
        text(
            "INSERT INTO audit_log (actor, action, subject_kind, subject_id, detail)"
            " VALUES (:a, :act, 'legal_hold', :id, CAST(:d AS jsonb))"
        ),
        {"a": actor, "act": action, "id": hold.id, "d": json.dumps(detail, sort_keys=True)},
    )


def _event(conn: Connection, tenant_id: TenantId, public_id: str) -> int:
    try:
        params = ledger_reads.bounds_params(public_id)
    except ValueError:
        raise BadRequest(f"{public_id!r} is not an event id.") from None
    found = conn.execute(
        text(f"SELECT id FROM events e WHERE {ledger_reads.by_public_id('e')} AND tenant_id = :t"),
        {**params, "t": tenant_id},
    ).scalar()
    if found is None:
        raise NotFound(f"No event {public_id!r} in this tenant.")
    return int(found)


def place(
    conn: Connection,
    tenant: str,
    actor: str,
    reason: str,
    *,
    source: str | None = None,
    business_key: list[str] | None = None,
    event: str | None = None,
    scope: TenantId | None = None,
) -> Hold:
    """Place a hold on a tenant, or on one of its sources, business keys or events (at
    most one of them), and audit it. ``scope``: the tenant the caller is limited to."""
    if sum(x is not None for x in (source, business_key, event)) > 1:
        raise BadRequest("A hold covers a tenant, or one source, business key or event of it.")
    if not reason.strip() or len(reason) > rules.MAX_REASON:
        raise BadRequest(f"A hold needs a reason (1-{rules.MAX_REASON} characters).")
    t = get_tenant(conn, tenant)
    if scope is not None and t.id != scope:
        raise NotFound(f"No tenant {tenant!r}.")
    values: dict[str, Any] = {"source_id": None, "bk": None, "event_id": None, "event_pid": None}
    kind = HoldScope.TENANT
    if source is not None:
        kind, values["source_id"] = HoldScope.SOURCE, get_source(conn, tenant, source).id
    elif business_key is not None:
        if not business_key:
            raise BadRequest("A business key hold needs the key's value(s).")
        kind, values["bk"] = HoldScope.BUSINESS_KEY, business_key_digest(t.id, business_key)
    elif event is not None:
        kind, values["event_id"] = HoldScope.EVENT, _event(conn, t.id, event)
        values["event_pid"] = event
    hold_id = conn.execute(
        text(
            "INSERT INTO legal_holds (public_id, tenant_id, scope, source_id,"
            " business_key_digest, event_id, event_public_id, reason, placed_by)"
            " VALUES (:p, :t, :scope, :source_id, :bk, :event_id, :event_pid, :reason, :a)"
            " RETURNING id"
        ),
        {
            **values,
            "p": "hold_" + secrets.token_hex(8),
            "t": t.id,
            "scope": kind.value,
            "reason": reason,
            "a": actor,
        },
    ).scalar_one()
    hold = by_id(conn, hold_id)
    assert hold is not None
    _audit(conn, actor, "hold_placed", hold)
    return hold


def release(conn: Connection, public_id: str, actor: str, scope: TenantId | None = None) -> Hold:
    """End a hold; a tenant-wide one ends on the second operator's release (the first only
    asks for it). Raises NotFound, HoldNotActive (released already) or Forbidden (the
    operator who asked confirms their own request)."""
    hold = get(conn, public_id, scope)
    if hold is None:
        raise NotFound(f"No legal hold {public_id!r}.")
    if hold.released_at is not None:
        raise HoldNotActive()
    ends = rules.check_release(hold.scope, hold.release_requested_by, actor)
    # The state test is in the UPDATE: a concurrent release is found here, not overwritten.
    if ends:
        sql = (
            "UPDATE legal_holds SET released_by = :a, released_at = now()"
            " WHERE id = :id AND released_at IS NULL"
            " AND release_requested_by IS NOT DISTINCT FROM :asked RETURNING id"
        )
    else:
        sql = (
            "UPDATE legal_holds SET release_requested_by = :a, release_requested_at = now()"
            " WHERE id = :id AND released_at IS NULL AND release_requested_by IS NULL"
            " RETURNING id"
        )
    changed = conn.execute(
        text(sql), {"a": actor, "id": hold.id, "asked": hold.release_requested_by}
    ).first()
    if changed is None:
        raise HoldNotActive("This legal hold changed meanwhile: look at it again.")
    done = by_id(conn, hold.id)
    assert done is not None
    if ends:
        _audit(conn, actor, "hold_released", done, requested_by=hold.release_requested_by)
    else:
        _audit(conn, actor, "hold_release_requested", done)
    return done


def cancel_release(
    conn: Connection, public_id: str, actor: str, scope: TenantId | None = None
) -> Hold:
    """Withdraw a pending request to release a tenant-wide hold (anyone entitled may)."""
    hold = get(conn, public_id, scope)
    if hold is None:
        raise NotFound(f"No legal hold {public_id!r}.")
    changed = conn.execute(
        text(
            "UPDATE legal_holds SET release_requested_by = NULL, release_requested_at = NULL"
            " WHERE id = :id AND released_at IS NULL AND release_requested_by IS NOT NULL"
            " RETURNING id"
        ),
        {"id": hold.id},
    ).first()
    if changed is None:
        raise HoldNotActive("No release of this legal hold is waiting.")
    done = by_id(conn, hold.id)
    assert done is not None
    _audit(conn, actor, "hold_release_withdrawn", done, requested_by=hold.release_requested_by)
    return done
