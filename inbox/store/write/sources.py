"""Tenants, sources and their secrets.

Secrets are stored encrypted (``inbox.infra.keyring``) and decrypted here, when a source
is read: the receiver's route cache holds the clear values for its few seconds, so
verifying a request decrypts nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Select, and_, func, insert, select, update
from sqlalchemy.dialects.postgresql import aggregate_order_by

from inbox.domain.errors import BadRequest, NotFound
from inbox.domain.records import Source, Tenant
from inbox.domain.retention import check_key_window
from inbox.domain.sources import SourceOptions
from inbox.infra.keyring import keyring
from inbox.store.schema.tables import source_secrets, sources, tenants


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


def list_tenants(conn: Connection) -> list[Tenant]:
    rows = conn.execute(select(tenants).order_by(tenants.c.name))
    return [Tenant(r.id, r.name, r.disabled) for r in rows]


def get_tenant(conn: Connection, name: str) -> Tenant:
    row = conn.execute(select(tenants).where(tenants.c.name == name)).first()
    if row is None:
        raise NotFound(f"No tenant {name!r}.")
    return Tenant(row.id, row.name, row.disabled)


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
    ring = keyring()
    for secret in secrets:
        conn.execute(
            insert(source_secrets).values(source_id=source_id, secret=ring.encrypt(secret))
        )
    return get_source(conn, tenant, name)


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


def add_secret(conn: Connection, source: Source, secret: str) -> None:
    conn.execute(
        insert(source_secrets).values(source_id=source.id, secret=keyring().encrypt(secret))
    )


def revoke_secrets_except(conn: Connection, source: Source, keep: str) -> int:
    """End a rotation: every secret but ``keep`` stops verifying. (Encryption is randomised,
    so the comparison is made on the decrypted values, not in SQL.)"""
    ring = keyring()
    rows = conn.execute(
        select(source_secrets.c.id, source_secrets.c.secret).where(
            source_secrets.c.source_id == source.id, source_secrets.c.revoked_at.is_(None)
        )
    ).all()
    ids = [r.id for r in rows if ring.decrypt(r.secret) != keep]
    if not ids:
        return 0
    conn.execute(
        update(source_secrets).where(source_secrets.c.id.in_(ids)).values(revoked_at=func.now())
    )
    return len(ids)


def set_enabled(conn: Connection, source: Source, enabled: bool) -> None:
    conn.execute(update(sources).where(sources.c.id == source.id).values(enabled=enabled))


def set_options(conn: Connection, source: Source, options: SourceOptions) -> None:
    conn.execute(update(sources).where(sources.c.id == source.id).values(options=options.to_dict()))


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
