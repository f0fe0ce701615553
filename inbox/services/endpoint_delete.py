"""Deleting an endpoint: a soft delete (the row stays, with who and when, so deliveries,
audit and evidence keep their references). A deleted endpoint is disabled, gets no new
deliveries and leaves the listings.

Nothing is dropped silently (``inbox.domain.held``): while the endpoint has deliveries not
yet sent (held, or waiting) a delete is refused unless the caller says what becomes of
them. The one choice is ``discard``: the existing discard, each a dead letter audited with
the reason, a second operator past ``INBOX_HELD_DISCARD_APPROVAL_MIN`` (then the endpoint is
disabled now, its deliveries held, and deleted when the discard is approved). There is no
release: a deleted endpoint is sent nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from inbox.domain import held as rules
from inbox.domain.held import Discard
from inbox.domain.records import EndpointId, TenantId
from inbox.services.endpoint_state import endpoint
from inbox.services.runtime import Runtime
from inbox.store.write import endpoints as estore
from inbox.store.write import held as hstore

__all__ = ["Deleted", "delete_endpoint"]


@dataclass(frozen=True, slots=True)
class Deleted:
    """``deleted``: done now; else its discard awaits a second operator (``discard``)."""

    endpoint: str
    deleted: bool
    discard: Discard | None = None


def delete_endpoint(
    rt: Runtime,
    actor: str,
    scope: TenantId | None,
    public_id: str,
    held: str | None = None,
    reason: str | None = None,
) -> Deleted:
    """Delete the endpoint (audited). Refused (409) while deliveries are being sent, and
    while some are held or waiting unless ``held="discard"`` with a ``reason``."""
    choice = rules.check_delete_choice(held, reason)
    with rt.engine.begin() as conn:
        ep = endpoint(conn, scope, public_id)
        eid = EndpointId(ep.id)
        estore.lock(conn, ep.id)  # no courier claims while we look
        found = hstore.outstanding(conn, eid)
        if found["sending"]:
            raise rules.DeliveriesInFlight(ep.public_id, found["sending"])
        left = found["held"] + found["pending"]
        if left and choice is None:
            raise rules.EndpointHasDeliveries(ep.public_id, found["held"], found["pending"])
        if not left:
            estore.soft_delete(conn, ep.id, actor)
            estore.audit(conn, actor, "delete", ep)
            return Deleted(ep.public_id, True)
        assert choice is not None  # for mypy: refused above
        if hstore.awaiting(conn, ep, lock=True) is not None:
            raise rules.DiscardAwaiting()
        estore.set_enabled(conn, ep.id, False, f"being deleted by {actor}")  # pending: held
        upto = hstore.last_id(conn, eid)
        count = hstore.held_count(conn, eid, upto)
        now = not rules.needs_second_operator(count, rt.settings.held_discard_approval_min)
        done = hstore.request(conn, ep, actor, choice, count, upto, now, delete=True)
        if now:
            estore.soft_delete(conn, ep.id, actor)
        estore.audit(
            conn,
            actor,
            "delete" if now else "request delete",
            ep,
            reason=choice,
            held=count,
            discard=done.public_id,
        )
    return Deleted(ep.public_id, now, done)
