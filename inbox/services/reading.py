"""What the API and the console read, one use case per page or resource.

A shell never opens a connection (``tests/unit/test_shells_open_no_connections.py``): it
calls one of these with the process's ``Runtime`` (the one calling convention of the
services, docs/explanation/architecture.md), and each opens one connection, runs the read
model's queries on it (``inbox.store.reads``) and turns a driver's error into the inbox's
own (``wrap_exceptions``), so what a page shows is read in one snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from inbox.domain.approval import Job
from inbox.domain.records import Endpoint, TenantId
from inbox.domain.states import DeliveryState, EventState
from inbox.services import admin
from inbox.services.runtime import Runtime
from inbox.store.db.errors import wrap_exceptions
from inbox.store.reads import audit as audit_reads
from inbox.store.reads import bulk as bulk_reads
from inbox.store.reads import dashboard as dashboard_reads
from inbox.store.reads import deliveries as delivery_reads
from inbox.store.reads import endpoint_health as health_reads
from inbox.store.reads import endpoints as endpoint_reads
from inbox.store.reads import events as event_reads
from inbox.store.reads import lanes as lane_reads
from inbox.store.reads import listing, stats
from inbox.store.reads import search as search_reads
from inbox.store.reads import sources as source_reads
from inbox.store.reads.bulk import Outcomes
from inbox.store.reads.deliveries import DeliveryGroup, DeliverySummary
from inbox.store.reads.detail import AuditEntry, DeliveryDetail, EventDetail
from inbox.store.reads.endpoint_health import EndpointHealth, EndpointStatus
from inbox.store.reads.events import Attempt, DeadLetterGroup, EventSummary
from inbox.store.reads.lanes import BlockedLane
from inbox.store.reads.listing import Filter


@contextmanager
def _reading(rt: Runtime) -> Iterator[Connection]:
    with wrap_exceptions(), rt.engine.connect() as conn:
        yield conn


# -- events ------------------------------------------------------------------------------


def list_events(
    rt: Runtime,
    scope: TenantId | None,
    f: Filter,
    limit: int,
    before_id: int | None,
    *,
    check_names: bool = False,
) -> list[EventSummary]:
    """A page of events; with ``check_names`` a tenant or source the filter names must
    exist (the CLI's typo is an error, where the API's filter just matches nothing)."""
    with _reading(rt) as conn:
        if check_names:
            admin.check_named(conn, f.tenant, f.source)
        return event_reads.list_events(conn, scope, f, limit, before_id)


@dataclass(frozen=True, slots=True)
class EventsPage:
    rows: list[EventSummary]
    failed_callbacks: dict[int, int]  # event id → its failed deliveries, for those with any


def events_page(
    rt: Runtime, scope: TenantId | None, f: Filter, limit: int, before_id: int | None
) -> EventsPage:
    """A page of events (``limit`` rows) and the failed callbacks of its first ``limit - 1``
    (the last row only tells whether there is a next page)."""
    with _reading(rt) as conn:
        rows = event_reads.list_events(conn, scope, f, limit, before_id)
        dead = delivery_reads.failed_callbacks(conn, [r.id for r in rows[: limit - 1]])
    return EventsPage(rows, dead)


def event_detail(rt: Runtime, public_id: str, scope: TenantId | None) -> EventDetail | None:
    with _reading(rt) as conn:
        return event_reads.event_detail(conn, public_id, scope)


@dataclass(frozen=True, slots=True)
class EventStory:
    event: EventDetail
    attempts: list[Attempt]  # every failed run, oldest first


def event_story(rt: Runtime, public_id: str, scope: TenantId | None) -> EventStory | None:
    """One event in full with its failed runs; None when the scope cannot see it."""
    with _reading(rt) as conn:
        found = event_reads.event_detail(conn, public_id, scope)
        row_id = listing.visible(conn, "events", public_id, scope)
        if found is None or row_id is None:
            return None
        return EventStory(found, event_reads.attempts(conn, row_id))


# -- deliveries --------------------------------------------------------------------------


def list_deliveries(
    rt: Runtime,
    scope: TenantId | None,
    f: Filter,
    limit: int,
    before_id: int | None,
    *,
    check_names: bool = False,
) -> list[DeliverySummary]:
    """A page of deliveries; ``check_names`` as for ``list_events``."""
    with _reading(rt) as conn:
        if check_names:
            admin.check_named(conn, f.tenant)
        return delivery_reads.list_deliveries(conn, scope, f, limit, before_id)


def delivery_detail(rt: Runtime, public_id: str, scope: TenantId | None) -> DeliveryDetail | None:
    with _reading(rt) as conn:
        return delivery_reads.delivery_detail(conn, public_id, scope)


# -- dead letters and search -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeadLetters:
    groups: list[DeadLetterGroup]
    deliveries: list[DeliveryGroup]
    lanes: list[BlockedLane]


def dead_letters(rt: Runtime, scope: TenantId | None) -> DeadLetters:
    """Quarantined events and failed deliveries grouped by cause, and the blocked lanes."""
    with _reading(rt) as conn:
        return DeadLetters(
            event_reads.dead_letter_groups(conn, scope),
            delivery_reads.failed_delivery_groups(conn, scope),
            lane_reads.blocked(conn, scope),
        )


def search(rt: Runtime, q: str, scope: TenantId | None) -> list[search_reads.Hit]:
    with _reading(rt) as conn:
        return search_reads.search(conn, q, scope)


# -- sources and endpoints ---------------------------------------------------------------


def source_summaries(rt: Runtime, scope: TenantId | None) -> list[source_reads.SourceSummary]:
    with _reading(rt) as conn:
        return source_reads.summaries(conn, scope)


def endpoint_health(rt: Runtime, scope: TenantId | None) -> list[EndpointHealth]:
    with _reading(rt) as conn:
        return health_reads.health(conn, scope)


@dataclass(frozen=True, slots=True)
class EndpointPage:
    endpoint: EndpointHealth
    recent: list[DeliverySummary]
    audit: list[AuditEntry]


def endpoint_page(
    rt: Runtime, public_id: str, scope: TenantId | None, recent: int
) -> EndpointPage | None:
    """An endpoint's health, its ``recent`` newest deliveries and who changed it."""
    with _reading(rt) as conn:
        ep = health_reads.health_of(conn, public_id, scope)
        if ep is None:
            return None
        return EndpointPage(
            ep,
            delivery_reads.list_deliveries(conn, scope, Filter(endpoint=public_id), recent, None),
            audit_reads.audit_trail(conn, "endpoint", ep.id),
        )


def endpoint_statuses(
    rt: Runtime, scope: TenantId | None, public_id: str | None = None
) -> list[EndpointStatus]:
    """Every endpoint's status in the scope (``inbox.domain.endpoint_health``, the one
    definition the console, the CLI and /metrics show), or one by its id (``[]`` if unseen)."""
    with _reading(rt) as conn:
        return health_reads.statuses(conn, scope, public_id)


@dataclass(frozen=True, slots=True)
class EndpointListing:
    rows: list[Endpoint]
    statuses: dict[int, EndpointStatus]  # endpoint row id → its status


def endpoint_listing(rt: Runtime, tenant: str | None, deleted: bool) -> EndpointListing:
    """A tenant's (or every) endpoint, deleted ones only when ``deleted``, with their
    statuses; a tenant named that does not exist is an error (the CLI's typo)."""
    with _reading(rt) as conn:
        admin.check_named(conn, tenant)
        rows = endpoint_reads.list_endpoints(conn, tenant, deleted)
        found = {s.id: s for s in health_reads.statuses(conn, deleted=deleted)}
    return EndpointListing(rows, found)


def endpoint_shown(rt: Runtime, public_id: str) -> tuple[Endpoint, EndpointStatus]:
    """One endpoint (deleted or not; ``NotFound`` if there is none) and its status."""
    with _reading(rt) as conn:
        ep = endpoint_reads.get_endpoint(conn, public_id)
        [status] = health_reads.statuses(conn, public_id=ep.public_id)
    return ep, status


# -- bulk replays and the dashboard ------------------------------------------------------


def replay_outcomes(rt: Runtime, job: Job) -> Outcomes:
    """What the items a bulk replay moved are doing now."""
    with _reading(rt) as conn:
        return bulk_reads.replay_outcomes(conn, job.id, job.kind)


@dataclass(frozen=True, slots=True)
class Dashboard:
    series: dashboard_reads.Series
    tiles: dict[str, Any]  # what is waiting now
    jobs: list[tuple[Job, Outcomes]]  # the newest bulk replays, with what became of them


def dashboard(
    rt: Runtime,
    window: dashboard_reads.Window,
    scope: TenantId | None,
    tenant: str | None,
    jobs: int = 5,
) -> Dashboard:
    """Each measure over ``window``, what is waiting now (of ``tenant``, the scope's name;
    None: every tenant), and the newest ``jobs`` bulk replays."""
    with _reading(rt) as conn:
        series = dashboard_reads.series(conn, window, scope)
        tiles = _now_tiles(conn, tenant)
        recent = [
            (job, bulk_reads.replay_outcomes(conn, job.id, job.kind))
            for public_id in dashboard_reads.recent_bulk_replays(conn, scope, jobs)
            if (job := bulk_reads.get_job(conn, public_id, scope)) is not None
        ]
    return Dashboard(series, tiles, recent)


def _now_tiles(conn: Connection, tenant: str | None) -> dict[str, Any]:
    """What is waiting now, from the same queries the /metrics endpoint reads."""
    depth = [r for r in stats.inbox_depth(conn) if tenant is None or r.tenant == tenant]
    backlog = [r for r in stats.delivery_backlog(conn) if tenant is None or r.tenant == tenant]

    def count(rows: list[Any], state: str) -> int:
        return sum(r.count for r in rows if r.state == state)

    pending = [r for r in depth if r.state in stats.PENDING_STATES and r.count]
    return {
        "received": count(depth, EventState.RECEIVED),
        "processing": count(depth, EventState.PROCESSING),
        "quarantined": count(depth, EventState.QUARANTINED),
        "oldest": max((r.oldest_age_seconds for r in pending), default=0.0),
        "deliveries_pending": count(backlog, DeliveryState.PENDING)
        + count(backlog, DeliveryState.SENDING),
        "deliveries_failed": count(backlog, DeliveryState.FAILED),
    }
