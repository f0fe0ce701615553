"""``InMemoryDeliveries``: the outbox (``inbox.services.ports.DeliveryStore``) in plain Python.

It shares its store's data, clock and transactions (``Memory.deliveries``), so the
deliveries a playbook's steps made are the ones a courier claims. Its rules are those of
``inbox/store/write/deliveries.py``: one endpoint's due deliveries in order, at most
``max_in_flight`` couriers at once (one while the endpoint is failing), a fence per claim,
attempts counted at claim time and given back on release, expired leases swept back to
pending (held while the endpoint is paused or disabled, failed when out of attempts),
every state change checked against
``inbox.domain.states.DELIVERY_ALLOWED``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from itertools import takewhile
from typing import Any

from inbox.domain import callbacks, throttle
from inbox.domain.callbacks import CallbackSet
from inbox.domain.circuit import Change, Circuit, CircuitState
from inbox.domain.errors import NotFound
from inbox.domain.records import (
    ClaimedDelivery,
    CourierRound,
    DeliveryAttempt,
    DeliveryId,
    Endpoint,
    EndpointId,
    TenantId,
)
from inbox.domain.states import DELIVERY_FINISHED, DeliveryState, transition
from inbox.testing._data import Attempt, Delivery, Memory


class InMemoryDeliveries:
    def __init__(self, store: Memory) -> None:
        self.store = store
        # Each endpoint's circuit as its row holds it: the state and when a probe may go.
        self.circuits: dict[int, tuple[Circuit, float | None]] = {}
        # Each endpoint's rate limit bucket: tokens left, and when (None: never used).
        self.buckets: dict[int, tuple[float, float | None]] = {}

    # -- for tests ------------------------------------------------------------------------

    def add_endpoint(
        self,
        tenant_id: int,
        endpoint_id: int,
        event_types: tuple[str, ...] | None = None,
        **fields: Any,
    ) -> Endpoint:
        """An enabled endpoint of the tenant; ``fields`` are ``Endpoint``'s."""
        ep = Endpoint(
            id=EndpointId(endpoint_id),
            public_id=f"ep_{endpoint_id:04d}",
            tenant_id=TenantId(tenant_id),
            tenant="acme",
            url="https://receiver.example/hooks",
            event_types=event_types,
            enabled=True,
            disabled_reason=None,
            max_attempts=4,  # the endpoints table's defaults
            retry_schedule=(5, 30, 120),
            timeout_ms=5000,
            max_in_flight=4,
            secrets=("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",),
        )
        ep = dataclasses.replace(ep, **fields)
        self.store.data.endpoints[endpoint_id] = ep
        return ep

    def all(self) -> list[Delivery]:
        """Every delivery, oldest first."""
        return sorted(self.store.data.deliveries.values(), key=lambda d: d.id)

    def get(self, delivery_id: int) -> Delivery:
        return next(d for d in self.store.data.deliveries.values() if d.id == delivery_id)

    def enqueue(self, sets: Sequence[CallbackSet]) -> set[EndpointId]:
        """One delivery per message and subscribed endpoint (``callbacks.fan_out``), each
        written once, held for an endpoint paused or disabled; the endpoints to ring."""
        data = self.store.data
        eps: dict[TenantId, list[Endpoint]] = {}
        for e in sorted(data.endpoints.values(), key=lambda e: e.id):
            if not e.deleted:  # a deleted endpoint is owed nothing
                eps.setdefault(e.tenant_id, []).append(e)
        owed, _ = callbacks.fan_out(sets, eps)
        rung: set[EndpointId] = set()
        for o in owed:
            ep = data.endpoints[o.endpoint_id]
            if o.public_id not in data.deliveries:
                data.deliveries[o.public_id] = Delivery(
                    len(data.deliveries) + 1,
                    o.public_id,
                    o.cbs.tenant_id,
                    ep.id,
                    o.cbs.event_id,
                    o.message.event_type,
                    body=o.body(),
                    replay=o.cbs.replay,
                    available_at=self.store.now,
                    state=DeliveryState.PENDING if ep.sends else DeliveryState.HELD,
                )
            if ep.sends:
                rung.add(ep.id)
        return rung

    # -- the DeliveryStore operations -----------------------------------------------------

    def begin(self) -> AbstractContextManager[Memory]:
        return self.store.begin()

    def endpoint(self, tx: Memory, endpoint_id: EndpointId) -> Endpoint:
        self.store.calls.append("endpoint")
        ep = self.store.data.endpoints.get(endpoint_id)
        if ep is None:
            raise NotFound(f"No endpoint {endpoint_id}.")
        return ep

    def _live(self, d: Delivery) -> bool:
        expires = d.lease_expires_at
        return d.state == DeliveryState.SENDING and expires is not None and expires > self.store.now

    def claim(
        self, tx: Memory, endpoint_id: EndpointId, owner: str, limit: int, lease: float
    ) -> list[ClaimedDelivery]:
        self.store.calls.append("claim_deliveries")
        ep = self.store.data.endpoints.get(endpoint_id)
        if ep is None or not ep.sends:
            return []
        now = self.circuit(tx, endpoint_id)
        probe = now.state != CircuitState.CLOSED
        if probe and (now.probe_in is None or now.probe_in > 0):
            return []
        mine = [d for d in self.store.data.deliveries.values() if d.endpoint_id == endpoint_id]
        busy = len({d.lease_owner for d in mine if self._live(d)})
        if busy >= (1 if ep.failing or probe else ep.max_in_flight):
            return []
        bucket = None
        if not probe and ep.rate_per_second:
            tokens, at = self.buckets.get(endpoint_id, (0.0, None))
            elapsed = None if at is None else self.store.now - at
            bucket = throttle.take(ep.rate_per_second, tokens, elapsed, limit)
            limit = bucket.allowed
            if not limit:
                return []
        pending = [d for d in mine if d.state == DeliveryState.PENDING]
        if probe:  # the oldest, whatever its retry time
            due = sorted(pending, key=lambda d: d.id)[:1]
        elif ep.ordered:  # the due run at the head of its unfinished ones, by id
            head = sorted(
                (d for d in mine if d.state in (DeliveryState.PENDING, DeliveryState.SENDING)),
                key=lambda d: d.id,
            )[:limit]
            due = list(
                takewhile(
                    lambda d: d.state == DeliveryState.PENDING and d.available_at <= self.store.now,
                    head,
                )
            )
        else:
            due = sorted(
                (d for d in pending if d.available_at <= self.store.now),
                key=lambda d: (d.available_at, d.id),
            )[:limit]
        for d in due:
            d.state = transition(d.state, DeliveryState.SENDING)
            d.lease_owner, d.lease_expires_at = owner, self.store.now + lease
            d.fence += 1
            d.attempts += 0 if probe else 1
        if probe and due:
            half = dataclasses.replace(now, state=CircuitState.HALF_OPEN)
            self.circuits[endpoint_id] = (half, self.store.now + lease)
        if bucket is not None:
            self.buckets[endpoint_id] = (
                bucket.tokens + bucket.allowed - len(due),
                self.store.now,
            )
        return [
            ClaimedDelivery(
                DeliveryId(d.id),
                d.fence,
                d.public_id,
                d.body,
                d.attempts,
                d.replay,
                d.trace_context,
                probe=probe,
            )
            for d in sorted(due, key=lambda d: d.id)
        ]

    def claim_round(
        self,
        tx: Memory,
        endpoint_id: EndpointId,
        owner: str,
        limit: int,
        lease_for: Callable[[Endpoint], float],
    ) -> CourierRound | None:
        """``claim`` with what it read; one thread at a time here, so never busy."""
        ep = self.endpoint(tx, endpoint_id)
        claims = self.claim(tx, endpoint_id, owner, limit, lease_for(ep))
        now = self.circuit(tx, endpoint_id)
        return CourierRound(ep, now, claims, None if claims else self.throttled(tx, endpoint_id))

    def circuit(self, tx: Memory, endpoint_id: EndpointId) -> Circuit:
        self.store.calls.append("circuit")
        now, probe_at = self.circuits.get(endpoint_id, (Circuit(), None))
        probe_in = None if probe_at is None else probe_at - self.store.now
        return dataclasses.replace(now, probe_in=probe_in, clock=self.store.now)

    def throttled(self, tx: Memory, endpoint_id: EndpointId) -> float | None:
        self.store.calls.append("throttled")
        ep = self.store.data.endpoints.get(endpoint_id)
        if ep is None or not ep.rate_per_second:
            return None
        tokens, at = self.buckets.get(endpoint_id, (0.0, None))
        elapsed = None if at is None else self.store.now - at
        return throttle.take(ep.rate_per_second, tokens, elapsed, 1).wait

    def set_circuit(self, tx: Memory, endpoint_id: EndpointId, change: Change) -> None:
        self.store.calls.append("set_circuit")
        c = change.circuit
        probe_at = None if c.probe_in is None else self.store.now + c.probe_in
        self.circuits[endpoint_id] = (c, probe_at)
        if change.closed:
            for d in self.store.data.deliveries.values():
                if d.endpoint_id == endpoint_id and d.state == DeliveryState.PENDING:
                    d.available_at = self.store.now

    def _held(self, claim: ClaimedDelivery) -> Delivery | None:
        """The delivery while ``claim`` names its current lease (expired or not)."""
        try:
            d = self.get(claim.id)
        except StopIteration:
            return None
        if d.fence != claim.fence or d.state != DeliveryState.SENDING:
            return None
        return d

    def finish_many(self, tx: Memory, sent: Sequence[DeliveryAttempt]) -> set[DeliveryId]:
        self.store.calls.append("finish_many")
        kept: set[DeliveryId] = set()
        for s in sent:
            d = self._held(s.claim)
            if d is not None:
                d.state = transition(d.state, self._stopped(d, DeliveryState(s.state)))
                d.last_status, d.last_error = s.status, s.error
                d.available_at = self.store.now + s.delay
                d.finished_at = self.store.now if d.state in DELIVERY_FINISHED else None
                d.lease_owner = d.lease_expires_at = None
                kept.add(s.claim.id)
            recorded = d or self._any(s.claim.id)
            if recorded is not None:  # the attempt happened, whether or not the lease held
                error_class = s.error if s.status is None else None
                recorded.log.append(Attempt(s.at, s.status, error_class, s.latency_ms, s.excerpt))
        return kept

    def _stopped(self, d: Delivery, state: DeliveryState) -> DeliveryState:
        """A delivery going back to pending is held while its endpoint does not send."""
        ep = self.store.data.endpoints.get(d.endpoint_id)
        if state == DeliveryState.PENDING and ep is not None and not ep.sends:
            return DeliveryState.HELD
        return state

    def _any(self, delivery_id: int) -> Delivery | None:
        try:
            return self.get(delivery_id)
        except StopIteration:
            return None

    def release(self, tx: Memory, claims: list[ClaimedDelivery], delay: float) -> None:
        self.store.calls.append("release")
        for c in claims:
            d = self._held(c)
            if d is None:
                continue
            d.state = transition(d.state, self._stopped(d, DeliveryState.PENDING))
            d.attempts -= 1
            d.available_at = self.store.now + delay
            d.lease_owner = d.lease_expires_at = None

    def set_failing(self, tx: Memory, endpoint_id: EndpointId, failing: bool) -> None:
        self.store.calls.append("set_failing")
        eps = self.store.data.endpoints
        if endpoint_id in eps:
            eps[endpoint_id] = dataclasses.replace(eps[endpoint_id], failing=failing)

    def disable(self, tx: Memory, endpoint_id: EndpointId, reason: str) -> None:
        self.store.calls.append("disable")
        eps = self.store.data.endpoints
        if endpoint_id in eps:
            eps[endpoint_id] = dataclasses.replace(
                eps[endpoint_id], enabled=False, disabled_reason=reason
            )
            for d in self.store.data.deliveries.values():
                if d.endpoint_id == endpoint_id and d.state == DeliveryState.PENDING:
                    d.state = transition(d.state, DeliveryState.HELD)

    def sweep(self, tx: Memory) -> list[EndpointId]:
        self.store.calls.append("sweep_deliveries")
        now, eps = self.store.now, self.store.data.endpoints
        for d in self.store.data.deliveries.values():
            expires = d.lease_expires_at
            if d.state != DeliveryState.SENDING or expires is None or expires > now:
                continue
            spent = d.attempts >= eps[d.endpoint_id].max_attempts
            back = DeliveryState.FAILED if spent else self._stopped(d, DeliveryState.PENDING)
            d.state = transition(d.state, back)
            d.finished_at = now if spent else None
            d.last_error = d.last_error or "lease expired"
            d.lease_owner = d.lease_expires_at = None
            d.available_at = now
        due = {
            EndpointId(d.endpoint_id)
            for d in self.store.data.deliveries.values()
            if d.state == DeliveryState.PENDING
            and d.available_at <= now
            and eps[d.endpoint_id].sends
        }
        return sorted(due)
