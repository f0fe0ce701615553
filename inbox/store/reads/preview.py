"""What a replay's preview reads: the events as a worker would load them, the guards'
inputs (the newest completed event with a business key, an effect's owner) and the
endpoints a callback would go to. Nothing here writes or locks."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.records import BulkJobId, EventId, TenantId
from inbox.domain.states import EventState
from inbox.store.db import sealing
from inbox.store.reads import ledger_reads

# The newest completed event of the same kind of position (time, or version): the replay
# preview asks it here, and inbox.store.write.staleness asks it under its lock.
NEWEST_COMPLETED = {
    column: text(
        f"""
        SELECT id, public_id, occurred_at, version FROM events
         WHERE tenant_id = :t AND business_key_digest = :bk AND id <> :id
           AND state = 'completed' AND {column} IS NOT NULL
         ORDER BY {column} DESC, id DESC
         LIMIT 1
        """
    )
    for column in ("occurred_at", "version")
}


@dataclass(frozen=True, slots=True)
class PlannedEvent:
    id: EventId
    public_id: str
    tenant_id: TenantId
    tenant: str
    source: str
    source_options: dict[str, Any]
    event_type: str | None
    business_key_digest: bytes | None
    content_type: str
    body: bytes | None
    state: EventState
    replay: int
    steps: dict[str, Any]

    def __post_init__(self) -> None:  # the column's text, as the enum it is
        object.__setattr__(self, "state", EventState(self.state))


@dataclass(frozen=True, slots=True)
class Newest:
    id: int
    public_id: str
    occurred_at: datetime | None
    version: Decimal | None


@dataclass(frozen=True, slots=True)
class EndpointRow:
    id: int
    public_id: str
    event_types: list[str] | None
    filter: str | None = None
    sends: bool = True  # neither paused nor disabled: otherwise its deliveries are held
    circuit: str = "closed"


_EVENT = text(
    """
    SELECT e.id, e.public_id, e.tenant_id, t.name AS tenant, s.name AS source,
           s.options AS source_options, e.event_type, e.business_key_digest, e.content_type,
           e.body, e.key_id, """
    + sealing.live("e")
    + """ AS key_live, e.state, e.replay,
           coalesce((SELECT jsonb_object_agg(st.name, st.result) FROM steps st
                      WHERE st.event_id = e.id), '{}'::jsonb) AS steps,
           """
    + sealing.steps_sealed("e")
    + """ AS steps_sealed
      FROM events e
      JOIN tenants t ON t.id = e.tenant_id
      JOIN sources s ON s.id = e.source_id
     WHERE e.public_id = ANY(CAST(:ids AS text[])) AND e.id >= :lo AND e.id < :hi
     ORDER BY e.id
    """
)


def events(conn: Connection, public_ids: list[str]) -> list[PlannedEvent]:
    """The named events (unknown ids are left out), oldest first."""
    if not public_ids:
        return []
    lo, hi = ledger_reads.span(public_ids)
    rows = conn.execute(_EVENT, {"ids": public_ids, "lo": lo, "hi": hi})
    keys = sealing.for_engine(conn.engine)
    return [
        PlannedEvent(
            id=r.id,
            public_id=r.public_id,
            tenant_id=r.tenant_id,
            tenant=r.tenant,
            source=r.source,
            source_options=dict(r.source_options or {}),
            event_type=r.event_type,
            business_key_digest=(
                bytes(r.business_key_digest) if r.business_key_digest is not None else None
            ),
            content_type=r.content_type,
            body=keys.open(conn, r.key_id, r.body, None, None, r.key_live).body,
            state=r.state,
            replay=r.replay,
            steps=keys.open_steps(conn, r.steps, r.steps_sealed, r.key_live is False),
        )
        for r in rows
    ]


def newest_completed(
    conn: Connection, tenant_id: TenantId, bk: bytes, event_id: EventId, by_time: bool
) -> Newest | None:
    """The newest other completed event with this business key, by time or by version."""
    # As inbox.store.write.staleness judges, without its lock or its writes.
    query = NEWEST_COMPLETED["occurred_at" if by_time else "version"]
    row = conn.execute(query, {"t": tenant_id, "bk": bk, "id": event_id}).first()
    return Newest(row.id, row.public_id, row.occurred_at, row.version) if row else None


def effect_owner(
    conn: Connection, tenant_id: TenantId, name: str, bk: bytes
) -> tuple[int, str] | None:
    """The event that owns a once-per-business-key effect (its id and public id), if any."""
    row = conn.execute(
        text(
            "SELECT f.event_id, e.public_id FROM effects f"
            " LEFT JOIN events e ON e.id = f.event_id"
            " WHERE f.tenant_id = :t AND f.name = :n AND f.business_key_digest = :bk"
        ),
        {"t": tenant_id, "n": name, "bk": bk},
    ).first()
    return (int(row.event_id), row.public_id or str(row.event_id)) if row else None


def endpoints(conn: Connection, tenant_id: TenantId) -> list[EndpointRow]:
    """Every endpoint of the tenant, as the outbox writes for them (a paused or disabled
    one's deliveries are held), with its filter and circuit."""
    rows = conn.execute(
        text(
            "SELECT id, public_id, event_types, filter, enabled AND NOT paused AS sends,"
            " circuit FROM endpoints WHERE tenant_id = :t AND deleted_at IS NULL ORDER BY id"
        ),
        {"t": tenant_id},
    )
    return [
        EndpointRow(r.id, r.public_id, r.event_types, r.filter, r.sends, r.circuit) for r in rows
    ]


def job_items(conn: Connection, job_id: BulkJobId, limit: int) -> list[str]:
    """A bulk replay's snapshotted items (public ids), in the order it replays them."""
    rows = conn.execute(
        text(
            "SELECT public_id FROM bulk_replay_items WHERE job_id = :id"
            " ORDER BY subject_id LIMIT :n"
        ),
        {"id": job_id, "n": limit},
    )
    return [r.public_id for r in rows]
