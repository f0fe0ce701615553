"""What operators do, one implementation each, behind the admin API, the console and the CLI.

Replays of events (one or many) and of dead-letter deliveries, redaction, legal holds, and
changes to callback endpoints. Each use case checks what the caller may see (``Actor.scope``),
writes and audits in one transaction, then rings the bells of its process (best effort,
after COMMIT: the sweeper re-rings for anything due). Bulk replays and their approval are
``inbox.services.replays``; tenants, sources, tokens, sessions and secrets are
``inbox.services.admin``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from inbox.domain import callbacks
from inbox.domain.erasure import ReplayErased
from inbox.domain.errors import NotFound
from inbox.domain.holds import Hold
from inbox.domain.records import Endpoint, TenantId
from inbox.services import endpoint_state
from inbox.services.bulk import NotReplayable
from inbox.services.runtime import Rung, Runtime
from inbox.store.reads import endpoints as ereads
from inbox.store.reads import erasures as erasure_reads
from inbox.store.reads import holds as hreads
from inbox.store.reads import lanes as lreads
from inbox.store.reads import listing
from inbox.store.write import deliveries as dstore
from inbox.store.write import endpoints as estore
from inbox.store.write import holds as hstore
from inbox.store.write import lanes as lstore
from inbox.store.write import operator, redaction
from inbox.store.write.lanes import Skipped
from inbox.store.write.redaction import Redaction

__all__ = [
    "Actor",
    "Hold",
    "Redaction",
    "Replayed",
    "Skipped",
    "blocked_lanes",
    "create_endpoint",
    "finish_endpoint_rotation",
    "get_endpoint",
    "get_hold",
    "list_endpoints",
    "list_holds",
    "place_hold",
    "redact",
    "release_hold",
    "replay_deliveries",
    "replay_delivery",
    "replay_event",
    "replay_events",
    "rotate_endpoint_secret",
    "set_endpoint_enabled",
    "skip_lane",
]

# Reads the CLI shows, from the read model.
list_endpoints = ereads.list_endpoints
get_endpoint = ereads.get_endpoint


@dataclass(frozen=True)
class Actor:
    """Who acts (audited by name) and the tenant they are limited to (None: every one)."""

    name: str
    scope: TenantId | None = None


@dataclass(frozen=True)
class Replayed:
    """What a replay moved (public ids), of how many named, and how its bell rang."""

    moved: list[str]
    named: int
    rung: Rung | None = None  # None: nothing moved, nothing rung


def check_visible(conn: Connection, actor: Actor, kind: str, public_ids: Sequence[str]) -> None:
    """Every event (``kind`` events) or delivery named must exist in the actor's scope:
    an unknown id is an error before anything moves."""
    unknown = [p for p in public_ids if listing.visible(conn, kind, p, actor.scope) is None]
    if unknown:
        more = f" (and {len(unknown) - 3} more)" if len(unknown) > 3 else ""
        what = "event" if kind == "events" else "delivery"
        raise NotFound(f"No {what} {', '.join(unknown[:3])}{more}.")


def replay_events(
    rt: Runtime,
    actor: Actor,
    public_ids: Sequence[str],
    *,
    rate: float | None = None,
    each: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Replayed:
    """Quarantined or filtered events back to received (completed steps are kept),
    audited with the actor's name; then the doorbell, once.

    Every id is checked first (``NotFound``); then one transaction per event, at most
    ``rate`` a second. An event that is not a dead letter is left as it is and not
    counted in ``moved``."""
    with rt.engine.connect() as conn:
        check_visible(conn, actor, "events", public_ids)
    moved: list[str] = []
    for public_id in public_ids:
        started = clock()
        with rt.engine.begin() as conn:
            moved += operator.replay(conn, [public_id], actor.name)
        if each is not None:
            each(public_id)
        if rate is not None:
            sleep(max(0.0, 1.0 / rate - (clock() - started)))
    rung = rt.bells.ring("doorbell") if moved else None
    return Replayed(moved, len(public_ids), rung)


def refuse_erased(rt: Runtime, actor: Actor, public_ids: Sequence[str]) -> None:
    """409 (``payload_erased``, naming the erasure) where a named event's payload was
    erased: a replay would have nothing to run (asked up front, not found by the worker)."""
    with rt.engine.connect() as conn:
        check_visible(conn, actor, "events", public_ids)
        for public_id in public_ids:
            erased = erasure_reads.of_event(conn, public_id)
            if erased is not None:
                raise ReplayErased(
                    f"Event {public_id} cannot be replayed: its payload was erased by"
                    f" {erased.erasure or 'an erasure'} on {erased.at.isoformat()}"
                    f" ({erased.by}); there is nothing left to run."
                )


def replay_event(rt: Runtime, actor: Actor, public_id: str) -> Replayed:
    """One event: 404 unless the actor sees it, 409 (``payload_erased``, naming the erasure)
    if its payload was erased, else 409 unless it is quarantined or filtered."""
    refuse_erased(rt, actor, [public_id])
    done = replay_events(rt, actor, [public_id])
    if not done.moved:
        raise NotReplayable("Only a quarantined or filtered event can be replayed.")
    return done


def skip_lane(rt: Runtime, actor: Actor, public_id: str, reason: str | None) -> Skipped:
    """Let an ordered lane move on past its quarantined event (which stays quarantined),
    audited with the reason; two operators when more than ``lane_skip_approval_above``
    events wait behind it (the first asks, another confirms). 404 unless the actor sees
    the event, 409 unless it blocks a lane. The doorbell rings once the lane moves on."""
    with rt.engine.begin() as conn:
        event_id = listing.visible(conn, "events", public_id, actor.scope)
        if event_id is None:
            raise NotFound(f"No event {public_id}.")
        done = lstore.skip(
            conn, event_id, public_id, actor.name, reason, rt.settings.lane_skip_approval_above
        )
    if done.status == "skipped":
        rt.bells.ring("doorbell")
    return done


def blocked_lanes(
    rt: Runtime, scope: TenantId | None, limit: int = 100
) -> list[lreads.BlockedLane]:
    """The lanes held by a quarantined event, longest blocked first, with how many
    events wait behind each."""
    with rt.engine.connect() as conn:
        return lreads.blocked(conn, scope, limit)


def replay_deliveries(rt: Runtime, actor: Actor, public_ids: Sequence[str]) -> Replayed:
    """Failed deliveries back to pending with the same webhook-id, audited; then each
    endpoint's courier is rung. Every id is checked first (``NotFound``)."""
    with rt.engine.begin() as conn:
        check_visible(conn, actor, "deliveries", public_ids)
        pairs = dstore.replay(conn, list(public_ids), actor.name)
    endpoints = {endpoint_id for _, endpoint_id in pairs}
    rung = rt.bells.ring("ring_couriers", endpoints) if endpoints else None
    return Replayed([p for p, _ in pairs], len(public_ids), rung)


def replay_delivery(rt: Runtime, actor: Actor, public_id: str) -> Replayed:
    """One delivery: 404 unless the actor sees it, 409 unless it has failed."""
    done = replay_deliveries(rt, actor, [public_id])
    if not done.moved:
        raise NotReplayable("Only a failed delivery can be replayed.")
    return done


def redact(rt: Runtime, actor: Actor, public_id: str, reason: str) -> Redaction:
    """Delete an event's raw body, keep its SHA-256 and every row; audited. Refused while
    a legal hold covers it or while it is unfinished (``inbox.store.write.redaction``)."""
    with rt.engine.begin() as conn:
        return redaction.redact(conn, public_id, actor.name, reason, actor.scope)


def place_hold(
    rt: Runtime,
    actor: Actor,
    tenant: str,
    reason: str,
    *,
    source: str | None = None,
    business_key: list[str] | None = None,
    event: str | None = None,
) -> Hold:
    """A legal hold on a tenant, or one source, business key or event of it; audited."""
    with rt.engine.begin() as conn:
        return hstore.place(
            conn,
            tenant,
            actor.name,
            reason,
            source=source,
            business_key=business_key,
            event=event,
            scope=actor.scope,
        )


def release_hold(rt: Runtime, actor: Actor, public_id: str, *, withdraw: bool = False) -> Hold:
    """End a hold (a tenant-wide one on a second operator's release: the first asks for
    it), or ``withdraw`` a release that waits for its second operator."""
    with rt.engine.begin() as conn:
        if withdraw:
            return hstore.cancel_release(conn, public_id, actor.name, actor.scope)
        return hstore.release(conn, public_id, actor.name, actor.scope)


def list_holds(
    rt: Runtime, scope: TenantId | None, *, include_released: bool = False
) -> list[Hold]:
    with rt.engine.connect() as conn:
        return hreads.listing(conn, scope, include_released=include_released)


def get_hold(rt: Runtime, public_id: str, scope: TenantId | None) -> Hold | None:
    with rt.engine.connect() as conn:
        return hreads.get(conn, public_id, scope)


def _endpoint(conn: Connection, actor: Actor, public_id: str) -> Endpoint:
    ep = ereads.get_endpoint(conn, public_id)  # NotFound: "No endpoint <id>."
    if (actor.scope is not None and ep.tenant_id != actor.scope) or ep.deleted:
        raise NotFound(f"No endpoint {public_id}.")  # a deleted one has no levers
    return ep


def create_endpoint(
    rt: Runtime,
    tenant: str,
    url: str,
    secret: str,
    event_types: list[str] | None,
    **options: Any,
) -> Endpoint:
    """A tenant's callback endpoint, signed with ``secret`` (``options``: max_attempts,
    retry_schedule, timeout_ms, max_in_flight, filter)."""
    with rt.engine.begin() as conn:
        return estore.create_endpoint(conn, tenant, url, secret, event_types, **options)


def set_endpoint_enabled(
    rt: Runtime, actor: Actor, public_id: str, enabled: bool
) -> endpoint_state.Changed:
    """Disable (nothing is sent; its deliveries are held) or enable (the held ones go out
    in their original order); audited (``inbox.services.endpoint_state``)."""
    return endpoint_state.set_enabled(rt, actor.name, actor.scope, public_id, enabled)


def rotate_endpoint_secret(rt: Runtime, actor: Actor, public_id: str) -> str:
    """Add a signing secret; during the overlap every active secret signs. Returns it."""
    secret = callbacks.new_secret()
    with rt.engine.begin() as conn:
        ep = _endpoint(conn, actor, public_id)
        estore.add_secret(conn, ep, secret)
        estore.audit(conn, actor.name, "rotate", ep)
    return secret


def finish_endpoint_rotation(
    rt: Runtime, actor: Actor, public_id: str, keep: str | None = None
) -> int:
    """End the overlap: only the newest secret signs (or ``keep``, when named). Returns
    how many were revoked."""
    with rt.engine.begin() as conn:
        ep = _endpoint(conn, actor, public_id)
        if keep is None:
            revoked = estore.finish_rotation(conn, ep.id)
        else:
            revoked = estore.revoke_secrets_except(conn, ep, keep)
        estore.audit(conn, actor.name, "finish rotation", ep)
    return revoked
