"""Deliveries as the API, the console, the CLI and the alarms read them: listings, one in
full, failed ones grouped, failed callbacks per event, when each endpoint's retries are due.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.records import EventId
from inbox.domain.states import DeliveryState
from inbox.store.reads import detail, ledger_reads, listing
from inbox.store.reads.detail import DeliveryDetail
from inbox.store.reads.ledger_reads import since_event
from inbox.store.reads.listing import Filter
from inbox.store.reads.scope import Scope, as_rows, scoped


@dataclass(frozen=True, slots=True)
class DeliverySummary:
    """A delivery as a listing shows it."""

    id: int
    public_id: str  # the webhook-id
    tenant: str
    endpoint: str  # the endpoint's public id
    url: str
    event_type: str
    state: DeliveryState
    replay: int
    attempts: int
    last_status: int | None
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None
    event: str | None  # the public id of the event it calls back about

    def __post_init__(self) -> None:  # the column's text, as the enum it is
        object.__setattr__(self, "state", DeliveryState(self.state))

    def public(self) -> dict[str, Any]:
        """As the API shows it: the row id stays inside."""
        return {k: v for k, v in asdict(self).items() if k != "id"}


_DELIVERIES = """
SELECT d.id, d.event_id, d.public_id, t.name AS tenant, ep.public_id AS endpoint, ep.url,
       d.event_type, d.state, d.replay, d.attempts, d.last_status, d.last_error, d.created_at,
       d.finished_at
  FROM deliveries d JOIN endpoints ep ON ep.id = d.endpoint_id JOIN tenants t ON t.id = d.tenant_id
"""


def list_deliveries(
    conn: Connection, scope: Scope, f: Filter, limit: int, before_id: int | None
) -> list[DeliverySummary]:
    where, bound = listing.where("d", scope, ledger_reads.tenant_id(conn, f.tenant), f, before_id)
    rows = conn.execute(text(_DELIVERIES + where), {**bound, "limit": limit}).fetchall()
    # The events' public ids by their ids, a list of constants: PostgreSQL picks their
    # days' partitions when it plans (a correlated subquery planned every partition).
    ids = sorted({r.event_id for r in rows if r.event_id is not None})
    names: dict[int, str] = {}
    if ids:
        found = conn.execute(
            text("SELECT id, public_id FROM events WHERE id = ANY(CAST(:ids AS bigint[]))"),
            {"ids": ids},
        )
        names = {int(r.id): r.public_id for r in found}
    return [
        DeliverySummary(
            **{k: v for k, v in r._mapping.items() if k != "event_id"}, event=names.get(r.event_id)
        )
        for r in rows
    ]


def delivery_detail(conn: Connection, public_id: str, scope: Scope) -> DeliveryDetail | None:
    if listing.visible(conn, "deliveries", public_id, scope) is None:
        return None
    return detail.delivery(conn, public_id)


@dataclass(frozen=True, slots=True)
class DeliveryGroup:
    tenant: str
    endpoint: str
    url: str
    event_type: str
    last_error: str | None
    count: int
    first_at: datetime | None
    last_at: datetime | None


_DELIVERY_GROUPS = f"""
SELECT t.name AS tenant, ep.public_id AS endpoint, ep.url, d.event_type, d.last_error,
       count(*) AS count, min(d.finished_at) AS first_at, max(d.finished_at) AS last_at
  FROM deliveries d JOIN endpoints ep ON ep.id = d.endpoint_id JOIN tenants t ON t.id = d.tenant_id
 WHERE d.state = 'failed' AND {scoped("d.tenant_id")}
 GROUP BY t.name, ep.public_id, ep.url, d.event_type, d.last_error
 ORDER BY count(*) DESC LIMIT :limit
"""


def failed_delivery_groups(conn: Connection, scope: Scope, limit: int = 100) -> list[DeliveryGroup]:
    """Failed deliveries grouped by endpoint, type and last error."""
    params = {"scope": scope, "limit": limit}
    return as_rows(DeliveryGroup, conn.execute(text(_DELIVERY_GROUPS), params))


def failed_callbacks(conn: Connection, event_ids: list[EventId]) -> dict[int, int]:
    """event id → how many of its deliveries are dead (failed), for those with any."""
    if not event_ids:
        return {}
    rows = conn.execute(
        text(
            "SELECT event_id, count(*) AS n FROM deliveries"
            " WHERE event_id = ANY(CAST(:ids AS bigint[])) AND state = 'failed'"
            " AND id >= :lo GROUP BY event_id"
        ),
        # no delivery is older than its event: days before the oldest event are skipped
        {"ids": event_ids, "lo": min(since_event(i) for i in event_ids)},
    )
    return {int(r.event_id): int(r.n) for r in rows}


def due_within(
    conn: Connection, horizon: float, slot: float, limit: int = 200
) -> list[tuple[int, float]]:
    """(endpoint, seconds until due) for each retry due in the next ``horizon`` seconds,
    rounded up to ``slot``; relative to the database clock."""
    rows = conn.execute(
        text(
            """
            SELECT DISTINCT d.endpoint_id,
                   ceil(extract(epoch FROM d.available_at - now()) / :slot) * :slot AS due_in
              FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id
             WHERE e.enabled AND NOT e.paused AND d.state = 'pending' AND d.available_at > now()
               AND d.available_at <= now() + make_interval(secs => :horizon)
             ORDER BY due_in LIMIT :limit
            """
        ),
        {"horizon": horizon, "slot": slot, "limit": limit},
    )
    return [(int(r.endpoint_id), float(r.due_in)) for r in rows]
