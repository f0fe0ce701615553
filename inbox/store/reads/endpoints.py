"""A tenant's callback endpoints as the couriers, the API, the console and the CLI read
them; their signing secrets are decrypted here (``inbox.infra.keyring``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.errors import NotFound
from inbox.domain.records import Endpoint, EndpointId
from inbox.infra.keyring import keyring

# Every column of the endpoint, its tenant's name and its live secrets (still encrypted).
_ENDPOINT = """
SELECT ep.*, t.name AS tenant,
       coalesce((SELECT array_agg(x.secret ORDER BY x.id) FROM endpoint_secrets x
                  WHERE x.endpoint_id = ep.id AND x.revoked_at IS NULL), '{}') AS secrets
  FROM endpoints ep JOIN tenants t ON t.id = ep.tenant_id
"""


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


def get_endpoint(conn: Connection, ref: EndpointId | str) -> Endpoint:
    column = "ep.id" if isinstance(ref, int) else "ep.public_id"
    row = conn.execute(text(f"{_ENDPOINT} WHERE {column} = :ref"), {"ref": ref}).first()
    if row is None:
        raise NotFound(f"No endpoint {ref}.")
    return to_endpoint(row)


def list_endpoints(
    conn: Connection, tenant: str | None = None, deleted: bool = False
) -> list[Endpoint]:
    """A tenant's (or every) endpoint; deleted ones only when ``deleted``."""
    rows = conn.execute(
        text(
            f"{_ENDPOINT} WHERE (CAST(:tenant AS text) IS NULL OR t.name = :tenant)"
            " AND (:deleted OR ep.deleted_at IS NULL) ORDER BY ep.id"
        ),
        {"tenant": tenant or None, "deleted": deleted},
    )
    return [to_endpoint(r) for r in rows]
