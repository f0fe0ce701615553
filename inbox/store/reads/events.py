"""Events as the API, the console, the CLI and the receiver read them: listings, one in
full, dead-letter groups, an event's failed runs, its stored response (synchronous mode).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.records import EventId
from inbox.domain.states import EventState
from inbox.store.db import sealing
from inbox.store.reads import detail, ledger_reads, listing
from inbox.store.reads.detail import EventDetail
from inbox.store.reads.listing import Filter
from inbox.store.reads.scope import Scope, as_rows, scoped


@dataclass(frozen=True, slots=True)
class StoredResponse:
    state: EventState
    status: int
    body: bytes

    def __post_init__(self) -> None:  # the column's text, as the enum it is
        object.__setattr__(self, "state", EventState(self.state))


STORED_RESPONSE = text(
    "SELECT state, response_status, response_body, "
    + sealing.live("e")
    + " AS key_live FROM events e WHERE id = :id"
)


def stored_response(conn: Connection, event_id: EventId) -> StoredResponse:
    """The answer as stored, opened where it is sealed (empty once its key was erased)."""
    row = conn.execute(STORED_RESPONSE, {"id": event_id}).one()
    body = sealing.for_engine(conn.engine).open_tagged(
        bytes(row.response_body), sealing.RESPONSE, row.key_live
    )
    return StoredResponse(row.state, row.response_status, body or b"")


@dataclass(frozen=True, slots=True)
class EventSummary:
    """An event as a listing shows it."""

    id: EventId
    public_id: str
    tenant: str
    source: str
    event_type: str | None
    state: EventState
    attempts: int
    replay: int
    received_at: datetime
    finished_at: datetime | None
    outcome: str | None
    last_error_class: str | None
    duplicate_count: int

    def __post_init__(self) -> None:  # the column's text, as the enum it is
        object.__setattr__(self, "state", EventState(self.state))

    def public(self) -> dict[str, Any]:
        """As the API shows it: the row id stays inside."""
        return {k: v for k, v in asdict(self).items() if k != "id"}


# What a list shows; its WHERE is made by ``listing.where``.
_EVENTS = (
    """
SELECT e.id, e.public_id, t.name AS tenant, s.name AS source, e.event_type, e.state,
       e.attempts, e.replay, e.received_at, e.finished_at, e.outcome, e.last_error_class,"""
    + ledger_reads.DUPLICATE_COUNT
    + " FROM events e JOIN tenants t ON t.id = e.tenant_id JOIN sources s ON s.id = e.source_id"
)


def list_events(
    conn: Connection, scope: Scope, f: Filter, limit: int, before_id: int | None
) -> list[EventSummary]:
    where, bound = listing.where("e", scope, ledger_reads.tenant_id(conn, f.tenant), f, before_id)
    rows = conn.execute(text(_EVENTS + where), {**bound, "limit": limit})
    return [EventSummary(**r._mapping) for r in rows]


def event_detail(conn: Connection, public_id: str, scope: Scope) -> EventDetail | None:
    """One event in full, with the deliveries it caused (each with its attempts)."""
    if listing.visible(conn, "events", public_id, scope) is None:
        return None
    return detail.event(conn, public_id)


@dataclass(frozen=True, slots=True)
class DeadLetterGroup:
    tenant: str
    source: str
    event_type: str | None
    error_class: str | None
    count: int
    first_at: datetime | None
    last_at: datetime | None
    sample_message: str | None
    latest: str


_GROUPS = f"""
SELECT t.name AS tenant, s.name AS source, e.event_type, e.last_error_class AS error_class,
       count(*) AS count, min(e.finished_at) AS first_at, max(e.finished_at) AS last_at,
       (array_agg(e.last_error_message ORDER BY e.id DESC))[1] AS sample_message,
       (array_agg(e.public_id ORDER BY e.id DESC))[1] AS latest
  FROM events e JOIN tenants t ON t.id = e.tenant_id JOIN sources s ON s.id = e.source_id
 WHERE e.state = 'quarantined' AND {scoped("e.tenant_id")}
 GROUP BY t.name, s.name, e.event_type, e.last_error_class
 ORDER BY count(*) DESC, max(e.finished_at) DESC NULLS LAST
 LIMIT :limit
"""


def dead_letter_groups(conn: Connection, scope: Scope, limit: int = 200) -> list[DeadLetterGroup]:
    """Quarantined events grouped by tenant, source, type and error class, largest first."""
    return as_rows(DeadLetterGroup, conn.execute(text(_GROUPS), {"scope": scope, "limit": limit}))


@dataclass(frozen=True, slots=True)
class Attempt:
    at: datetime
    attempt: int
    step: str | None
    error_class: str
    error_message: str | None
    traceback: str | None
    outcome: str  # retry | quarantined


def attempts(conn: Connection, event_id: EventId) -> list[Attempt]:
    """Every failed run of the event, oldest first, across replays."""
    rows = conn.execute(
        text(
            "SELECT at, attempt, step, error_class, error_message, traceback, outcome"
            " FROM event_attempts WHERE event_id = :id ORDER BY id"
        ),
        {"id": event_id},
    )
    return [Attempt(**r._mapping) for r in rows]
