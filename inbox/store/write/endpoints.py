"""A tenant's callback endpoints and their signing secrets (stored encrypted,
``inbox.infra.keyring``): the changes; ``inbox.store.reads.endpoints`` reads them."""

from __future__ import annotations

import secrets as pysecrets
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from inbox.domain import filters
from inbox.domain.errors import BadRequest
from inbox.domain.records import Endpoint, EndpointId
from inbox.store.reads.endpoints import get_endpoint
from inbox.store.reads.sources import get_tenant
from inbox.store.schema.tables import audit_log, endpoint_secrets, endpoints
from inbox.store.write import held
from inbox.store.write import secrets as signing_secrets


def create_endpoint(
    conn: Connection,
    tenant: str,
    url: str,
    secret: str,
    event_types: list[str] | None = None,
    **options: Any,
) -> Endpoint:
    if not url.startswith(("http://", "https://")):
        raise BadRequest("An endpoint URL starts with http:// or https://.")
    if options.get("filter") is not None:
        filters.check(options["filter"], filters.ENDPOINT_VARIABLES, "endpoint filter")
    t = get_tenant(conn, tenant)
    endpoint_id = conn.execute(
        insert(endpoints)
        .values(
            public_id="ep_" + pysecrets.token_hex(8),
            tenant_id=t.id,
            url=url,
            event_types=event_types or None,
            **options,
        )
        .returning(endpoints.c.id)
    ).scalar_one()
    signing_secrets.add(conn, "endpoint", endpoint_id, secret)
    return get_endpoint(conn, endpoint_id)


def add_secret(conn: Connection, ep: Endpoint, secret: str) -> None:
    signing_secrets.add(conn, "endpoint", ep.id, secret)


def revoke_secrets_except(conn: Connection, ep: Endpoint, keep: str) -> int:
    """Every secret but ``keep`` stops signing."""
    return signing_secrets.revoke_all_except(conn, "endpoint", ep.id, keep)


def set_enabled(
    conn: Connection, endpoint_id: EndpointId, enabled: bool, reason: str | None
) -> int:
    """Disable (its deliveries are held) or enable (released in order, unless it is also
    paused). How many deliveries were held or released."""
    conn.execute(
        update(endpoints)
        .where(endpoints.c.id == endpoint_id)
        .values(enabled=enabled, disabled_reason=None if enabled else reason)
    )
    return _hold_or_release(conn, endpoint_id)


def set_paused(conn: Connection, endpoint_id: EndpointId, paused: bool) -> int:
    """Pause (its deliveries are held) or resume (released in order, unless it is also
    disabled). How many deliveries were held or released."""
    conn.execute(update(endpoints).where(endpoints.c.id == endpoint_id).values(paused=paused))
    return _hold_or_release(conn, endpoint_id)


def _hold_or_release(conn: Connection, endpoint_id: EndpointId) -> int:
    sends = conn.execute(
        select(endpoints.c.enabled & ~endpoints.c.paused).where(endpoints.c.id == endpoint_id)
    ).scalar_one()
    eid = EndpointId(endpoint_id)
    return held.release_held(conn, eid) if sends else held.hold(conn, eid)


def lock(conn: Connection, endpoint_id: EndpointId) -> None:
    """Take the endpoint's row lock (as a courier's claim does, first)."""
    conn.execute(select(endpoints.c.id).where(endpoints.c.id == endpoint_id).with_for_update())


def soft_delete(conn: Connection, endpoint_id: EndpointId, actor: str) -> None:
    """Deleted, and disabled: the row stays (deliveries, audit and evidence refer to it);
    nothing is sent to it or made for it again."""
    conn.execute(
        update(endpoints)
        .where(endpoints.c.id == endpoint_id)
        .values(
            deleted_at=func.now(),
            deleted_by=actor,
            enabled=False,
            disabled_reason=f"deleted by {actor}",
        )
    )


def set_ordered(conn: Connection, endpoint_id: EndpointId, ordered: bool) -> None:
    conn.execute(update(endpoints).where(endpoints.c.id == endpoint_id).values(ordered=ordered))


def set_max_in_flight(conn: Connection, endpoint_id: EndpointId, slots: int) -> None:
    conn.execute(update(endpoints).where(endpoints.c.id == endpoint_id).values(max_in_flight=slots))


def finish_rotation(conn: Connection, endpoint_id: EndpointId) -> int:
    """End an overlap: every active secret but the newest stops signing."""
    newest = (
        select(endpoint_secrets.c.id)
        .where(
            endpoint_secrets.c.endpoint_id == endpoint_id, endpoint_secrets.c.revoked_at.is_(None)
        )
        .order_by(endpoint_secrets.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    result = conn.execute(
        update(endpoint_secrets)
        .where(
            endpoint_secrets.c.endpoint_id == endpoint_id,
            endpoint_secrets.c.revoked_at.is_(None),
            endpoint_secrets.c.id != newest,
        )
        .values(revoked_at=func.now())
    )
    return int(result.rowcount)


def audit(conn: Connection, actor: str, action: str, ep: Endpoint, **detail: Any) -> None:
    """An operator's change to an endpoint, in the audit log (never a secret)."""
    conn.execute(
        insert(audit_log).values(
            actor=actor,
            action=action,
            subject_kind="endpoint",
            subject_id=ep.id,
            detail={"public_id": ep.public_id, **detail},
        )
    )
