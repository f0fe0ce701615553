"""Tenants and sources as the receiver, the API, the console and the CLI read them.

A source's secrets are decrypted here, when it is read (``inbox.infra.keyring``): the
receiver's route cache holds the clear values for its few seconds, so verifying a request
decrypts nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Select, and_, func, select
from sqlalchemy.dialects.postgresql import aggregate_order_by

from inbox.domain.errors import NotFound
from inbox.domain.records import Source, Tenant
from inbox.domain.sources import SourceOptions
from inbox.infra.keyring import keyring
from inbox.store.schema.tables import source_secrets, sources, tenants

# A tenant's name and state: what every path needs, and all a store at an older revision
# has (migration tests run these before 0028); its fairness settings are read apart.
_BASIC = (tenants.c.id, tenants.c.name, tenants.c.disabled)


def list_tenants(conn: Connection) -> list[Tenant]:
    rows = conn.execute(select(*_BASIC).order_by(tenants.c.name))
    return [Tenant(r.id, r.name, r.disabled) for r in rows]


def get_tenant(conn: Connection, name: str) -> Tenant:
    row = conn.execute(select(*_BASIC).where(tenants.c.name == name)).first()
    if row is None:
        raise NotFound(f"No tenant {name!r}.")
    return Tenant(row.id, row.name, row.disabled)


def tenant_settings(conn: Connection, name: str | None = None) -> list[Tenant]:
    """Tenants (or the one named) with their fairness settings (in-flight cap, weight)."""
    query = select(*_BASIC, tenants.c.max_in_flight, tenants.c.weight).order_by(tenants.c.name)
    if name is not None:
        query = query.where(tenants.c.name == name)
    rows = conn.execute(query)
    return [Tenant(r.id, r.name, r.disabled, r.max_in_flight, r.weight) for r in rows]


def _source_query() -> Select[Any]:
    live = (source_secrets.c.source_id == sources.c.id, source_secrets.c.revoked_at.is_(None))

    def active(column: Any) -> Any:  # the live secrets' values, in the order of their ids
        agg = func.array_agg(aggregate_order_by(column, source_secrets.c.id))
        return select(func.coalesce(agg, [])).where(*live).scalar_subquery()

    return select(
        sources.c.id,
        sources.c.tenant_id,
        tenants.c.name.label("tenant"),
        sources.c.name,
        sources.c.scheme,
        and_(sources.c.enabled, ~tenants.c.disabled).label("enabled"),
        sources.c.options,
        active(source_secrets.c.secret).label("secrets"),
        active(source_secrets.c.id).label("secret_ids"),
    ).join(tenants, tenants.c.id == sources.c.tenant_id)


def _to_source(row: Any) -> Source:
    return Source(
        id=row.id,
        tenant_id=row.tenant_id,
        tenant=row.tenant,
        name=row.name,
        scheme=row.scheme,
        enabled=row.enabled,
        options=SourceOptions.from_dict(row.options, check_schema=False),
        secrets=tuple(keyring().decrypt(s) for s in row.secrets or ()),
        secret_ids=tuple(int(i) for i in row.secret_ids or ()),
    )


def find_source(conn: Connection, tenant: str, name: str) -> Source | None:
    row = conn.execute(
        _source_query().where(tenants.c.name == tenant, sources.c.name == name)
    ).first()
    return _to_source(row) if row else None


def get_source(conn: Connection, tenant: str, name: str) -> Source:
    src = find_source(conn, tenant, name)
    if src is None:
        raise NotFound(f"No source {name!r} for tenant {tenant!r}.")
    return src


def list_sources(conn: Connection, tenant: str | None = None) -> list[Source]:
    query = _source_query().order_by(tenants.c.name, sources.c.name)
    if tenant:
        query = query.where(tenants.c.name == tenant)
    return [_to_source(r) for r in conn.execute(query)]


def named_playbooks(conn: Connection) -> list[tuple[str, str, str]]:
    """(tenant, source, playbook) of every enabled source that names a playbook."""
    name = sources.c.options["playbook"].astext
    rows = conn.execute(
        select(tenants.c.name.label("tenant"), sources.c.name.label("source"), name.label("pb"))
        .join_from(sources, tenants, sources.c.tenant_id == tenants.c.id)
        .where(sources.c.options.has_key("playbook"), sources.c.enabled, ~tenants.c.disabled)
        .order_by(tenants.c.name, sources.c.name)
    )
    return [(r.tenant, r.source, r.pb) for r in rows]
