"""The one subscription rule (``callbacks.route``) and the fan-out every writer of
deliveries shares: the store's one statement per commit, the in-memory fake and the
replay preview."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from inbox.domain.callbacks import CallbackSet, Outgoing, Route, delivery_id, fan_out, route
from inbox.domain.records import EventId, TenantId

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Ep:
    id: int
    event_types: tuple[str, ...] | None = None
    filter: str | None = None


def test_types_come_before_the_filter() -> None:
    paid = Outgoing("order.paid", {"amount": 5}, NOW)
    assert route(Ep(1), "order.paid", paid.data) is Route.OWED
    assert route(Ep(1, ("order.refunded",)), "order.paid", paid.data) is Route.UNSUBSCRIBED
    big = Ep(1, None, "payload.amount > 10")
    assert route(big, "order.paid", paid.data) is Route.FILTERED
    assert route(big, "order.paid", {"amount": 50}) is Route.OWED
    # Not subscribed to the type: the filter is not asked (nothing counted as filtered).
    assert route(Ep(1, ("x",), "payload.amount > 10"), "order.paid", paid.data) is (
        Route.UNSUBSCRIBED
    )


def test_fan_out_keeps_message_order_per_set_and_counts_filtered_by_tenant() -> None:
    a, b = TenantId(1), TenantId(2)
    msgs = [Outgoing("order.paid", {"amount": n}, NOW) for n in (5, 50)]
    sets = [
        CallbackSet(a, "acme", EventId(7), "evt_a", "notify", msgs),
        CallbackSet(b, "beta", None, "evt_b", "notify", msgs[:1]),
        CallbackSet(a, "acme", EventId(8), "evt_c", "notify", []),
    ]
    eps = {a: [Ep(10), Ep(11, None, "payload.amount > 10")], b: [Ep(20, ("other",))]}
    owed, filtered = fan_out(sets, eps)
    assert [(o.cbs.event_public_id, o.endpoint_id) for o in owed] == [
        ("evt_a", 10),
        ("evt_a", 10),
        ("evt_a", 11),
    ]
    assert [o.public_id for o in owed] == [
        delivery_id("evt_a", "notify", 0, 10),
        delivery_id("evt_a", "notify", 1, 10),
        delivery_id("evt_a", "notify", 1, 11),
    ]
    assert filtered == {"acme": 1}
    assert b"evt_a" not in owed[0].body() and b'"tenant":"acme"' in owed[0].body()
