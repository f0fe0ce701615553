"""Which active legal holds cover an event, as SQL text: what a hold means, beside its
table, for every room (partition drops refuse a held day, retention skips held bodies,
``inbox.store.reads.holds`` names the holds that cover an event)."""

from __future__ import annotations


def covering(event: str) -> str:
    """``FROM`` text: the active holds that cover the events row aliased ``event``."""
    return f"""legal_holds h
     WHERE h.released_at IS NULL AND h.tenant_id = {event}.tenant_id
       AND (h.scope = 'tenant'
            OR (h.scope = 'source' AND h.source_id = {event}.source_id)
            OR (h.scope = 'business_key' AND h.business_key_digest = {event}.business_key_digest)
            OR (h.scope = 'event' AND h.event_id = {event}.id))"""


def held(event: str) -> str:
    """SQL true when an active hold covers the events row aliased ``event``."""
    return f"EXISTS (SELECT 1 FROM {covering(event)})"
