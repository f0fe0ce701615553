"""Tenants, sources and their secrets: the changes (``inbox.store.reads.sources`` reads them).

Secrets are stored encrypted (``inbox.infra.keyring``) and decrypted when a source is read.
"""

from __future__ import annotations

from sqlalchemy import Connection, insert, select, update

from inbox.domain import fairness
from inbox.domain.errors import BadRequest
from inbox.domain.records import Source, Tenant
from inbox.domain.retention import check_key_window
from inbox.domain.sources import SourceOptions
from inbox.store.reads.sources import get_source, get_tenant, tenant_settings
from inbox.store.schema.tables import sources, tenants
from inbox.store.write import secrets as signing_secrets


def create_tenant(conn: Connection, name: str) -> Tenant:
    if not name or "/" in name or len(name) > 100:
        raise BadRequest("A tenant name is 1-100 characters without '/'.")
    exists = conn.execute(select(tenants.c.id).where(tenants.c.name == name)).first()
    if exists:
        raise BadRequest(f"Tenant {name!r} already exists.")
    row = conn.execute(
        insert(tenants)
        .values(name=name)
        .returning(tenants.c.id, tenants.c.name, tenants.c.disabled)
    ).one()
    return Tenant(row.id, row.name, row.disabled)


def set_fairness(
    conn: Connection,
    name: str,
    max_in_flight: int | None = None,
    weight: int | None = None,
    *,
    no_cap: bool = False,
) -> Tenant:
    """Set a tenant's in-flight cap (``no_cap``: remove it) and weight (1-100); what is not
    given stays. BadRequest for a value out of range, NotFound for no such tenant."""
    values: dict[str, int | None] = {}
    if no_cap:
        values["max_in_flight"] = None
    elif max_in_flight is not None:
        values["max_in_flight"] = fairness.check_cap(max_in_flight)
    if weight is not None:
        values["weight"] = fairness.check_weight(weight)
    tenant = get_tenant(conn, name)
    if values:
        conn.execute(update(tenants).where(tenants.c.id == tenant.id).values(**values))
    [changed] = tenant_settings(conn, name)
    return changed


def create_source(
    conn: Connection,
    tenant: str,
    name: str,
    scheme: str,
    secrets: list[str],
    options: SourceOptions,
) -> Source:
    t = get_tenant(conn, tenant)
    if not name or "/" in name or len(name) > 100:
        raise BadRequest("A source name is 1-100 characters without '/'.")
    if options.key_ttl_hours is not None:
        check_key_window(scheme, options.key_ttl_hours)
    taken = conn.execute(
        select(sources.c.id).where(sources.c.tenant_id == t.id, sources.c.name == name)
    ).first()
    if taken:
        raise BadRequest(f"Source {name!r} already exists for tenant {tenant!r}.")
    source_id = conn.execute(
        insert(sources)
        .values(tenant_id=t.id, name=name, scheme=scheme, options=options.to_dict())
        .returning(sources.c.id)
    ).scalar_one()
    for secret in secrets:
        signing_secrets.add(conn, "source", source_id, secret)
    return get_source(conn, tenant, name)


def add_secret(conn: Connection, source: Source, secret: str) -> None:
    signing_secrets.add(conn, "source", source.id, secret)


def revoke_secrets_except(conn: Connection, source: Source, keep: str) -> int:
    """End a rotation: every secret but ``keep`` stops verifying."""
    return signing_secrets.revoke_all_except(conn, "source", source.id, keep)


def set_enabled(conn: Connection, source: Source, enabled: bool) -> None:
    conn.execute(update(sources).where(sources.c.id == source.id).values(enabled=enabled))


def set_options(conn: Connection, source: Source, options: SourceOptions) -> None:
    conn.execute(update(sources).where(sources.c.id == source.id).values(options=options.to_dict()))
