"""An endpoint's state as operators change it: disable and enable, pause and resume, and
discarding what it holds. One implementation each, behind the admin API, the console and
the CLI; each checks what the caller may see, writes and audits in one transaction, then
rings the endpoint's couriers when its deliveries go out again.

Nothing is dropped (``inbox.domain.held``): while an endpoint is paused or disabled its
deliveries are held; enabling or resuming it releases them in their original order.
Its limits (a rate, and deliveries in flight) hold across every courier process.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from inbox.domain import held as rules
from inbox.domain.errors import BadRequest, NotFound
from inbox.domain.held import Discard
from inbox.domain.records import Endpoint, EndpointId, TenantId
from inbox.services.runtime import Runtime
from inbox.store.reads import endpoints as ereads
from inbox.store.write import endpoint_rate as rate_store
from inbox.store.write import endpoints as estore
from inbox.store.write import held as hstore

__all__ = [
    "Changed",
    "Discard",
    "approve_discard",
    "discard_held",
    "set_enabled",
    "set_limits",
    "set_ordered",
    "set_paused",
    "withdraw_discard",
]


@dataclass(frozen=True, slots=True)
class Changed:
    """What an enable, disable, pause or resume did: ``held`` deliveries held by it, or
    ``released`` (due now, in order); ``sends``: whether the endpoint is attempted now."""

    endpoint: str
    sends: bool
    held: int = 0
    released: int = 0


def endpoint(conn: Connection, scope: TenantId | None, public_id: str) -> Endpoint:
    """The endpoint the caller may see and change (a deleted one is gone: NotFound)."""
    ep = ereads.get_endpoint(conn, public_id)  # NotFound: "No endpoint <id>."
    if (scope is not None and ep.tenant_id != scope) or ep.deleted:
        raise NotFound(f"No endpoint {public_id}.")
    return ep


def _changed(rt: Runtime, ep: Endpoint, moved: int, sends: bool) -> Changed:
    if sends:
        rt.bells.ring("ring_couriers", {ep.id})
        return Changed(ep.public_id, True, released=moved)
    return Changed(ep.public_id, False, held=moved)


def set_enabled(
    rt: Runtime, actor: str, scope: TenantId | None, public_id: str, enabled: bool
) -> Changed:
    """Disable (nothing is sent; its deliveries are held) or enable (the held ones go out
    in order, unless it is paused too); audited. Enabling withdraws an awaiting discard."""
    with rt.engine.begin() as conn:
        ep = endpoint(conn, scope, public_id)
        reason = None if enabled else f"disabled by {actor}"
        moved = estore.set_enabled(conn, ep.id, enabled, reason)
        if enabled:
            hstore.decide(conn, ep, actor, approve=False)
        estore.audit(conn, actor, "enable" if enabled else "disable", ep, deliveries=moved)
        sends = enabled and not ep.paused
    return _changed(rt, ep, moved, sends)


def set_paused(
    rt: Runtime, actor: str, scope: TenantId | None, public_id: str, paused: bool
) -> Changed:
    """Pause (nothing is sent; its deliveries are held) or resume (the held ones go out in
    order, unless it is disabled too); audited."""
    with rt.engine.begin() as conn:
        ep = endpoint(conn, scope, public_id)
        moved = estore.set_paused(conn, ep.id, paused)
        if not paused and ep.enabled:
            hstore.decide(conn, ep, actor, approve=False)
        estore.audit(conn, actor, "pause" if paused else "resume", ep, deliveries=moved)
        sends = ep.enabled and not paused
    return _changed(rt, ep, moved, sends)


def discard_held(
    rt: Runtime, actor: str, scope: TenantId | None, public_id: str, reason: str | None
) -> Discard:
    """Discard the endpoint's held deliveries (each becomes a dead letter, audited with the
    reason): at once up to ``INBOX_HELD_DISCARD_APPROVAL_MIN`` of them, past that once a
    second operator approves (``approve_discard``)."""
    why = rules.check_reason(reason)
    with rt.engine.begin() as conn:
        ep = endpoint(conn, scope, public_id)
        if hstore.awaiting(conn, ep, lock=True) is not None:
            raise rules.DiscardAwaiting()
        upto = hstore.last_id(conn, EndpointId(ep.id))
        held = hstore.held_count(conn, EndpointId(ep.id), upto)
        if held == 0:
            raise rules.NothingHeld()
        now = not rules.needs_second_operator(held, rt.settings.held_discard_approval_min)
        done = hstore.request(conn, ep, actor, why, held, upto, now)
        action = "discard held" if now else "request discard held"
        estore.audit(conn, actor, action, ep, reason=why, held=held, discard=done.public_id)
    return done


def approve_discard(rt: Runtime, actor: str, scope: TenantId | None, public_id: str) -> Discard:
    """A second operator approves the awaiting discard: the deliveries it covers that are
    still held become dead letters; audited."""
    with rt.engine.begin() as conn:
        ep = endpoint(conn, scope, public_id)
        waiting = hstore.awaiting(conn, ep, lock=True)
        if waiting is None:
            raise rules.NoDiscardAwaiting()
        rules.check_approver(waiting.requested_by, actor)
        done = hstore.decide(conn, ep, actor, approve=True)
        assert done is not None  # locked above
        estore.audit(
            conn, actor, "approve discard held", ep, discard=done.public_id, held=done.discarded
        )
        if done.delete_endpoint:  # asked by a delete: what was held since goes too
            eid = EndpointId(ep.id)
            later = hstore.discard_held(conn, eid, hstore.last_id(conn, eid), actor, done.reason)
            estore.soft_delete(conn, ep.id, actor)
            estore.audit(conn, actor, "delete", ep, discard=done.public_id, held=later)
    return done


def withdraw_discard(rt: Runtime, actor: str, scope: TenantId | None, public_id: str) -> Discard:
    """Withdraw the awaiting discard (anyone entitled may): nothing is discarded; audited."""
    with rt.engine.begin() as conn:
        ep = endpoint(conn, scope, public_id)
        done = hstore.decide(conn, ep, actor, approve=False)
        if done is None:
            raise rules.NoDiscardAwaiting()
        estore.audit(conn, actor, "withdraw discard held", ep, discard=done.public_id)
    return done


MAX_RATE = 10_000.0  # messages a second: more is no limit at all
MAX_IN_FLIGHT = 64  # as ``inbox endpoints create --max-in-flight`` allows


def set_limits(
    rt: Runtime,
    actor: str,
    scope: TenantId | None,
    public_id: str,
    *,
    rate: float | str | None = "keep",
    max_in_flight: int | None = None,
) -> Endpoint:
    """Its rate (messages a second, across every courier; None: unlimited; "keep": as it
    is) and in-flight limit (deliveries sent at once); the backlog waits, nothing is
    dropped. Audited."""
    if rate not in ("keep", None) and not (
        isinstance(rate, int | float) and 0 < float(rate) <= MAX_RATE
    ):
        raise BadRequest(f"rate_per_second is a number above 0, at most {MAX_RATE:g}.")
    if max_in_flight is not None and not (
        isinstance(max_in_flight, int) and 1 <= max_in_flight <= MAX_IN_FLIGHT
    ):
        raise BadRequest(f"max_in_flight is a whole number from 1 to {MAX_IN_FLIGHT}.")
    with rt.engine.begin() as conn:
        ep = endpoint(conn, scope, public_id)
        detail: dict[str, object] = {}
        if rate != "keep":
            value = None if rate is None else float(rate)
            rate_store.set_rate(conn, ep.id, value)
            detail["rate_per_second"] = value
        if max_in_flight is not None:
            estore.set_max_in_flight(conn, ep.id, max_in_flight)
            detail["max_in_flight"] = max_in_flight
        estore.audit(conn, actor, "limits", ep, **detail)
        changed = ereads.get_endpoint(conn, ep.id)
    rt.bells.ring("ring_couriers", {ep.id})  # a higher limit: more may go now
    return changed


def set_ordered(
    rt: Runtime, actor: str, scope: TenantId | None, public_id: str, ordered: bool
) -> Endpoint:
    """Ordered (one delivery in flight, the next once the previous is delivered or dead,
    in the order they were made) or not; audited."""
    with rt.engine.begin() as conn:
        ep = endpoint(conn, scope, public_id)
        estore.set_ordered(conn, ep.id, ordered)
        estore.audit(conn, actor, "order" if ordered else "unorder", ep, ordered=ordered)
        changed = ereads.get_endpoint(conn, ep.id)
    rt.bells.ring("ring_couriers", {ep.id})
    return changed
