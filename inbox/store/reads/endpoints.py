"""A tenant's callback endpoints as the couriers, the API, the console and the CLI read
them; their signing secrets are decrypted here (``inbox.infra.keyring``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Select, func, select

from inbox.domain.errors import NotFound
from inbox.domain.records import Endpoint
from inbox.infra.keyring import keyring
from inbox.store.schema.tables import endpoint_secrets, endpoints, tenants


def _query() -> Select[Any]:
    active = (
        select(func.coalesce(func.array_agg(endpoint_secrets.c.secret), []))
        .where(
            endpoint_secrets.c.endpoint_id == endpoints.c.id,
            endpoint_secrets.c.revoked_at.is_(None),
        )
        .scalar_subquery()
    )
    return select(endpoints, tenants.c.name.label("tenant"), active.label("secrets")).join(
        tenants, tenants.c.id == endpoints.c.tenant_id
    )


def to_endpoint(r: Any) -> Endpoint:
    return Endpoint(
        id=r.id,
        public_id=r.public_id,
        tenant_id=r.tenant_id,
        tenant=r.tenant,
        url=r.url,
        event_types=tuple(r.event_types) if r.event_types is not None else None,
        enabled=r.enabled,
        disabled_reason=r.disabled_reason,
        max_attempts=r.max_attempts,
        retry_schedule=tuple(r.retry_schedule),
        timeout_ms=r.timeout_ms,
        max_in_flight=r.max_in_flight,
        secrets=tuple(keyring().decrypt(s) for s in r.secrets or ()),
        failing=r.failing,
        filter=r.filter,
        paused=r.paused,
        rate_per_second=r.rate_per_second,
        ordered=r.ordered,
        deleted=r.deleted_at is not None,
    )


def get_endpoint(conn: Connection, ref: int | str) -> Endpoint:
    cond = endpoints.c.id == ref if isinstance(ref, int) else endpoints.c.public_id == ref
    row = conn.execute(_query().where(cond)).first()
    if row is None:
        raise NotFound(f"No endpoint {ref}.")
    return to_endpoint(row)


def list_endpoints(
    conn: Connection, tenant: str | None = None, deleted: bool = False
) -> list[Endpoint]:
    """A tenant's (or every) endpoint; deleted ones only when ``deleted``."""
    q = _query().order_by(endpoints.c.id)
    if not deleted:
        q = q.where(endpoints.c.deleted_at.is_(None))
    if tenant:
        q = q.where(tenants.c.name == tenant)
    return [to_endpoint(r) for r in conn.execute(q)]
