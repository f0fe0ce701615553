"""Tenants and sources as the receiver, the API, the console and the CLI read them.

A source's secrets are decrypted here, when it is read (``inbox.infra.keyring``): the
receiver's route cache holds the clear values for its few seconds, so verifying a request
decrypts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.errors import NotFound
from inbox.domain.records import Source, Tenant
from inbox.domain.sources import SourceOptions
from inbox.infra.keyring import keyring
from inbox.store.reads.scope import Scope, as_rows, scoped

# A tenant's name and state (``_BASIC``) are what every path needs, and all a store at an
# older revision has (migration tests run these before 0031); its fairness settings are
# read apart (``tenant_settings``).
_BASIC = "SELECT id, name, disabled FROM tenants"


def list_tenants(conn: Connection) -> list[Tenant]:
    rows = conn.execute(text(f"{_BASIC} ORDER BY name"))
    return [Tenant(r.id, r.name, r.disabled) for r in rows]


def get_tenant(conn: Connection, name: str) -> Tenant:
    row = conn.execute(text(f"{_BASIC} WHERE name = :name"), {"name": name}).first()
    if row is None:
        raise NotFound(f"No tenant {name!r}.")
    return Tenant(row.id, row.name, row.disabled)


# A source, enabled only while its tenant is too, with its live secrets' values (still
# encrypted) and ids, in the order of their ids.
_SOURCE = """
SELECT s.id, s.tenant_id, t.name AS tenant, s.name, s.scheme,
       s.enabled AND NOT t.disabled AS enabled, s.options,
       coalesce(x.secrets, '{}') AS secrets, coalesce(x.ids, '{}') AS secret_ids
  FROM sources s JOIN tenants t ON t.id = s.tenant_id
  LEFT JOIN LATERAL (
        SELECT array_agg(k.secret ORDER BY k.id) AS secrets, array_agg(k.id ORDER BY k.id) AS ids
          FROM source_secrets k WHERE k.source_id = s.id AND k.revoked_at IS NULL) x ON true
"""


def tenant_settings(conn: Connection, name: str | None = None) -> list[Tenant]:
    """Tenants (or the one named) with their fairness settings (in-flight cap, weight)."""
    rows = conn.execute(
        text(
            "SELECT id, name, disabled, max_in_flight, weight FROM tenants"
            " WHERE CAST(:name AS text) IS NULL OR name = :name ORDER BY name"
        ),
        {"name": name},
    )
    return [Tenant(r.id, r.name, r.disabled, r.max_in_flight, r.weight) for r in rows]


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
        text(f"{_SOURCE} WHERE t.name = :tenant AND s.name = :name"),
        {"tenant": tenant, "name": name},
    ).first()
    return _to_source(row) if row else None


def get_source(conn: Connection, tenant: str, name: str) -> Source:
    src = find_source(conn, tenant, name)
    if src is None:
        raise NotFound(f"No source {name!r} for tenant {tenant!r}.")
    return src


def list_sources(conn: Connection, tenant: str | None = None) -> list[Source]:
    rows = conn.execute(
        text(
            f"{_SOURCE} WHERE CAST(:tenant AS text) IS NULL OR t.name = :tenant"
            " ORDER BY t.name, s.name"
        ),
        {"tenant": tenant or None},
    )
    return [_to_source(r) for r in rows]


def named_playbooks(conn: Connection) -> list[tuple[str, str, str]]:
    """(tenant, source, playbook) of every enabled source that names a playbook."""
    rows = conn.execute(
        text(
            "SELECT t.name AS tenant, s.name AS source, s.options ->> 'playbook' AS pb"
            " FROM sources s JOIN tenants t ON t.id = s.tenant_id"
            " WHERE s.options ? 'playbook' AND s.enabled AND NOT t.disabled"
            " ORDER BY t.name, s.name"
        )
    )
    return [(r.tenant, r.source, r.pb) for r in rows]


@dataclass(frozen=True, slots=True)
class SourceSummary:
    id: int
    tenant: str
    name: str
    scheme: str
    enabled: bool
    tenant_disabled: bool
    options: dict[str, Any]
    created_at: datetime
    active_secrets: int
    last_hour: int
    last_day: int
    quarantined_day: int
    failures_day: int
    last_received_at: datetime | None
    last_failure_at: datetime | None
    last_failure_class: str | None
    last_failure_message: str | None


_SUMMARIES = f"""
WITH day AS (
    -- One pass over the last day's events (ix_events_received_at), counted per source.
    SELECT e.source_id,
           count(*) FILTER (WHERE e.received_at >= now() - interval '1 hour') AS last_hour,
           count(*) AS last_day,
           count(*) FILTER (WHERE e.state = 'quarantined') AS quarantined_day,
           max(e.received_at) AS last_received_at
      FROM events e
     WHERE e.received_at >= now() - interval '1 day' AND {scoped("e.tenant_id")}
     GROUP BY e.source_id
), failures AS (
    -- The last day's failed attempts per source (ix_event_attempts_at), and the latest one.
    SELECT DISTINCT ON (e.source_id) e.source_id,
           count(*) OVER (PARTITION BY e.source_id) AS failures_day,
           a.at, a.error_class, a.error_message
      FROM event_attempts a JOIN events e ON e.id = a.event_id
     WHERE a.at >= now() - interval '1 day' AND {scoped("e.tenant_id")}
     ORDER BY e.source_id, a.id DESC
)
SELECT s.id, t.name AS tenant, s.name, s.scheme, s.enabled, t.disabled AS tenant_disabled,
       s.options, s.created_at,
       (SELECT count(*) FROM source_secrets x
         WHERE x.source_id = s.id AND x.revoked_at IS NULL) AS active_secrets,
       coalesce(d.last_hour, 0) AS last_hour, coalesce(d.last_day, 0) AS last_day,
       coalesce(d.quarantined_day, 0) AS quarantined_day, d.last_received_at,
       coalesce(f.failures_day, 0) AS failures_day,
       f.at AS last_failure_at, f.error_class AS last_failure_class,
       f.error_message AS last_failure_message
  FROM sources s JOIN tenants t ON t.id = s.tenant_id
  LEFT JOIN day d ON d.source_id = s.id
  LEFT JOIN failures f ON f.source_id = s.id
 WHERE {scoped("s.tenant_id")}
 ORDER BY t.name, s.name
"""


def summaries(conn: Connection, scope: Scope) -> list[SourceSummary]:
    return as_rows(SourceSummary, conn.execute(text(_SUMMARIES), {"scope": scope}))
