"""The in-memory outbox keeps the same rules as PostgreSQL's: one scenario, both stores.

Each scenario runs against ``SqlDeliveryStore`` on the real database and against
``inbox.testing.InMemoryDeliveries``, through the same ``DeliveryStore`` calls (deliveries are
made by ``WorkStore.enqueue_deliveries``, as a playbook step makes them), and asserts the same
answers. A rule the fake gets wrong fails here.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import pytest
from sqlalchemy import Engine, text

from inbox.domain.callbacks import CallbackSet, Outgoing
from inbox.domain.circuit import Change, Circuit, CircuitState
from inbox.domain.errors import NotFound
from inbox.domain.records import ClaimedDelivery, EndpointId, TenantId
from inbox.domain.states import DeliveryState
from inbox.services.ports import DeliveryStore, WorkStore
from inbox.store.write import endpoints
from inbox.store.write.delivery_store import SqlDeliveryStore
from inbox.store.write.work import SqlWorkStore
from inbox.testing import InMemoryStore

LEASE = 30.0


class Subject(Protocol):
    store: DeliveryStore[Any]
    work: WorkStore[Any]
    tenant_id: TenantId
    tenant: str

    def add_endpoint(self, **options: Any) -> EndpointId: ...

    def expire(self, public_id: str) -> None: ...

    def row(self, public_id: str) -> tuple[str, int]: ...  # (state, attempts)

    def recorded(self, public_id: str) -> int: ...  # attempts recorded


class Sql:
    def __init__(self, engine: Engine, make_source: Any) -> None:
        self.engine = engine
        source = make_source()
        self.tenant_id, self.tenant = source.tenant_id, source.tenant
        self.store = SqlDeliveryStore(engine)
        self.work = SqlWorkStore(engine)

    def add_endpoint(self, **options: Any) -> EndpointId:
        types = options.pop("event_types", None)
        with self.engine.begin() as conn:
            url = "https://receiver.example/hooks"
            ep = endpoints.create_endpoint(conn, self.tenant, url, "whsec_x", types, **options)
            return ep.id

    def expire(self, public_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE deliveries SET lease_expires_at = now() - interval '1 second'"
                    " WHERE public_id = :p"
                ),
                {"p": public_id},
            )

    def row(self, public_id: str) -> tuple[str, int]:
        with self.engine.connect() as conn:
            r = conn.execute(
                text("SELECT state, attempts FROM deliveries WHERE public_id = :p"),
                {"p": public_id},
            ).one()
            return str(r.state), int(r.attempts)

    def recorded(self, public_id: str) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM delivery_attempts a JOIN deliveries d"
                        " ON d.id = a.delivery_id WHERE d.public_id = :p"
                    ),
                    {"p": public_id},
                ).scalar_one()
            )


class Fake:
    def __init__(self) -> None:
        self.fake = self.work = InMemoryStore()
        self.store = self.fake.deliveries
        self.tenant_id, self.tenant = TenantId(1), "acme"
        self._ids = iter(range(1, 1000))

    def add_endpoint(self, **options: Any) -> EndpointId:
        return self.fake.add_endpoint(self.tenant_id, next(self._ids), **options).id

    def _find(self, public_id: str) -> Any:
        return self.fake.data.deliveries[public_id]

    def expire(self, public_id: str) -> None:
        self._find(public_id).lease_expires_at = self.fake.now - 1

    def row(self, public_id: str) -> tuple[str, int]:
        d = self._find(public_id)
        return str(d.state), d.attempts

    def recorded(self, public_id: str) -> int:
        return len(self._find(public_id).log)


@pytest.fixture(params=["postgresql", "in-memory"])
def subject(request: pytest.FixtureRequest) -> Iterator[Subject]:
    if request.param == "postgresql":
        yield Sql(request.getfixturevalue("engine"), request.getfixturevalue("make_source"))
    else:
        yield Fake()


@dataclass(frozen=True)
class Sent:
    """One attempt's result, the shape the courier hands ``finish_many``."""

    claim: ClaimedDelivery
    state: str
    status: int | None = 200
    error: str | None = None
    delay: float = 0.0
    latency_ms: float = 12.0
    excerpt: str | None = None
    at: datetime = datetime(2026, 1, 1, tzinfo=UTC)


def enqueue(s: Subject, count: int, event_type: str = "order.paid", step: str = "s") -> set[int]:
    messages = [Outgoing(event_type, {"n": i}, datetime.now(UTC)) for i in range(count)]
    evt = f"evt_{secrets.token_hex(6)}"
    with s.work.begin() as tx:
        sets = [CallbackSet(s.tenant_id, s.tenant, None, evt, step, messages)]
        return s.work.enqueue_deliveries(tx, sets)


def claim(s: Subject, ep: EndpointId, owner: str = "c1", limit: int = 10) -> list[ClaimedDelivery]:
    with s.store.begin() as tx:
        return s.store.claim(tx, ep, owner, limit, LEASE)


def finish(s: Subject, *sent: Sent) -> set[int]:
    with s.store.begin() as tx:
        return set(s.store.finish_many(tx, list(sent)))


def test_deliveries_are_claimed_in_order_one_slot_at_a_time(subject: Subject) -> None:
    ep = subject.add_endpoint(max_in_flight=1)
    assert enqueue(subject, 3) == {ep}
    first = claim(subject, ep, limit=2)
    assert [c.attempts for c in first] == [1, 1] and first == sorted(first, key=lambda c: c.id)
    assert claim(subject, ep, owner="c2") == []  # the endpoint's one slot is busy
    assert finish(subject, *(Sent(c, DeliveryState.DELIVERED) for c in first)) == {
        c.id for c in first
    }
    assert [subject.row(c.public_id) for c in first] == [("delivered", 1)] * 2
    [third] = claim(subject, ep, owner="c2")
    assert third.id not in {c.id for c in first} and third.body.startswith(b"{")


def test_slots_follow_max_in_flight_and_a_failing_endpoint_gets_one(subject: Subject) -> None:
    default = subject.add_endpoint()
    with subject.store.begin() as tx:
        assert subject.store.endpoint(tx, default).max_in_flight == 4  # the table's default
    ep = subject.add_endpoint(max_in_flight=2)
    enqueue(subject, 4)
    assert len(claim(subject, ep, owner="c1", limit=1)) == 1
    assert len(claim(subject, ep, owner="c2", limit=1)) == 1
    assert claim(subject, ep, owner="c3", limit=1) == []
    other = subject.add_endpoint(max_in_flight=2)
    with subject.store.begin() as tx:
        subject.store.set_failing(tx, other, True)
    enqueue(subject, 2)
    assert len(claim(subject, other, owner="c1", limit=1)) == 1
    assert claim(subject, other, owner="c2", limit=1) == []  # failing: one courier at a time


def test_a_delivery_is_made_once_per_step_and_endpoint_and_type(subject: Subject) -> None:
    paid = subject.add_endpoint(event_types=["order.paid"])
    other = subject.add_endpoint(event_types=["order.refunded"])
    messages = [Outgoing("order.paid", {"n": 1}, datetime.now(UTC))]
    for _ in range(2):  # a re-run step makes the same delivery, not a second one
        with subject.work.begin() as tx:
            cbs = CallbackSet(
                subject.tenant_id, subject.tenant, None, "evt_same", "notify", messages
            )
            rung = subject.work.enqueue_deliveries(tx, [cbs])
        assert rung == {paid}
    assert len(claim(subject, paid)) == 1 and claim(subject, other) == []


def test_writes_are_fenced_but_every_attempt_is_recorded(subject: Subject) -> None:
    ep = subject.add_endpoint(max_in_flight=1)
    enqueue(subject, 1)
    [old] = claim(subject, ep)
    subject.expire(old.public_id)
    with subject.store.begin() as tx:
        assert subject.store.sweep(tx) == [ep]
    [new] = claim(subject, ep, owner="c2")
    assert (new.id, new.fence, new.attempts) == (old.id, old.fence + 1, 2)
    assert finish(subject, Sent(old, DeliveryState.DELIVERED)) == set()  # the lost lease
    with subject.store.begin() as tx:
        subject.store.release(tx, [old], 0.0)  # fenced too: nothing happens
    assert subject.row(new.public_id) == ("sending", 2)
    assert subject.recorded(new.public_id) == 1  # the old courier's attempt did happen
    assert finish(subject, Sent(new, DeliveryState.DELIVERED)) == {new.id}
    assert subject.row(new.public_id) == ("delivered", 2)


def test_a_released_delivery_is_uncounted_and_a_retry_waits(subject: Subject) -> None:
    ep = subject.add_endpoint(max_in_flight=1)
    enqueue(subject, 2)
    first, second = claim(subject, ep)
    assert finish(subject, Sent(first, DeliveryState.PENDING, status=503, delay=60.0)) == {first.id}
    with subject.store.begin() as tx:
        subject.store.release(tx, [second], 0.0)
    assert subject.row(second.public_id) == ("pending", 0)
    assert subject.row(first.public_id) == ("pending", 1)
    [again] = claim(subject, ep)  # the retry is not due yet; the released one is
    assert (again.id, again.attempts) == (second.id, 1)
    with subject.store.begin() as tx:
        subject.store.release(tx, [again], 60.0)
    assert claim(subject, ep) == []


def test_an_expired_lease_out_of_attempts_fails(subject: Subject) -> None:
    ep = subject.add_endpoint(max_attempts=1)
    enqueue(subject, 1)
    [c] = claim(subject, ep)
    with subject.store.begin() as tx:
        assert subject.store.sweep(tx) == []  # a live lease is left alone
    subject.expire(c.public_id)
    with subject.store.begin() as tx:
        assert subject.store.sweep(tx) == []  # nothing left due: it failed
    assert subject.row(c.public_id) == ("failed", 1)
    assert claim(subject, ep) == []


def test_a_disabled_endpoint_gets_no_claims(subject: Subject) -> None:
    ep = subject.add_endpoint()
    enqueue(subject, 1)
    with subject.store.begin() as tx:
        subject.store.disable(tx, ep, "the endpoint answered 410 Gone")
        found = subject.store.endpoint(tx, ep)
    assert (found.enabled, found.disabled_reason) == (False, "the endpoint answered 410 Gone")
    assert claim(subject, ep) == []
    with pytest.raises(NotFound), subject.store.begin() as tx:
        subject.store.endpoint(tx, EndpointId(10**9))


def test_a_disabled_endpoints_deliveries_are_held_never_dropped(subject: Subject) -> None:
    ep = subject.add_endpoint(max_in_flight=1)
    enqueue(subject, 3)
    first, second, third = claim(subject, ep, limit=3)
    with subject.store.begin() as tx:
        subject.store.release(tx, [third], 0.0)  # back to pending, before the 410
        subject.store.disable(tx, ep, "the endpoint answered 410 Gone")
    assert subject.row(third.public_id) == ("held", 0)  # pending when disabled: held
    assert finish(subject, Sent(first, DeliveryState.PENDING, status=503)) == {first.id}
    assert subject.row(first.public_id) == ("held", 1)  # a retry after the disable: held
    subject.expire(second.public_id)
    with subject.store.begin() as tx:
        assert subject.store.sweep(tx) == []  # swept while disabled: held, nothing to ring
    assert subject.row(second.public_id) == ("held", 1)
    assert enqueue(subject, 1, step="later") == set()  # written held, nothing rung
    assert claim(subject, ep) == []


def test_an_open_circuit_gives_one_probe_uncounted_and_a_close_makes_all_due(
    subject: Subject,
) -> None:
    ep = subject.add_endpoint()
    enqueue(subject, 3)
    first, second, third = claim(subject, ep, limit=3)
    retry = (Sent(c, DeliveryState.PENDING, status=503, delay=600.0) for c in (first, second))
    assert finish(subject, *retry)
    with subject.store.begin() as tx:
        subject.store.release(tx, [third], 0.0)  # due first, had the circuit not closed
        opened = Circuit(CircuitState.OPEN, 5, 1.0, 30.0)
        subject.store.set_circuit(tx, ep, Change(opened, opened=True))
    assert claim(subject, ep) == []  # the probe is not due yet
    with subject.store.begin() as tx:
        subject.store.set_circuit(tx, ep, Change(Circuit(CircuitState.OPEN, 5, 1.0, 0.0)))
    [probe] = claim(subject, ep)
    assert (probe.id, probe.probe, probe.attempts) == (first.id, True, 1)  # the oldest, uncounted
    assert claim(subject, ep, owner="c2") == []  # one probe at a time
    with subject.store.begin() as tx:
        assert subject.store.circuit(tx, ep).state == CircuitState.HALF_OPEN
    assert finish(subject, Sent(probe, DeliveryState.DELIVERED)) == {probe.id}
    with subject.store.begin() as tx:
        subject.store.set_circuit(tx, ep, Change(Circuit(), closed=True))
    [next_one] = claim(subject, ep, limit=1)
    assert next_one.id == second.id  # in the order made, not the order they became due


def test_a_rate_limit_leases_a_token_per_delivery_and_says_how_long_to_wait(
    subject: Subject,
) -> None:
    ep = subject.add_endpoint(rate_per_second=2.0)
    enqueue(subject, 5)
    assert len(claim(subject, ep, limit=50)) == 2  # a full bucket: one second's worth
    assert claim(subject, ep, owner="c2") == []  # no token left, whoever asks
    with subject.store.begin() as tx:
        wait = subject.store.throttled(tx, ep)
    assert wait is not None and 0 < wait <= 0.5
    free = subject.add_endpoint()
    enqueue(subject, 1, step="free")
    with subject.store.begin() as tx:
        assert subject.store.throttled(tx, free) is None


def test_an_ordered_endpoint_gives_its_head_run_and_a_retry_blocks_what_follows(
    subject: Subject,
) -> None:
    ep = subject.add_endpoint(ordered=True, max_in_flight=4)
    enqueue(subject, 3)
    first, second, third = claim(subject, ep)
    assert claim(subject, ep, owner="c2") == []  # the head is in flight: nothing else
    assert finish(
        subject,
        Sent(first, DeliveryState.DELIVERED),
        Sent(second, DeliveryState.PENDING, status=503, delay=60.0),
    ) == {first.id, second.id}
    with subject.store.begin() as tx:
        subject.store.release(tx, [third], 0.0)
    assert subject.row(third.public_id) == ("pending", 0)
    assert claim(subject, ep, owner="c2") == []  # due, but behind the retry of the second


def test_a_courier_round_is_the_claim_with_what_it_read(subject: Subject) -> None:
    ep = subject.add_endpoint(rate_per_second=2.0, timeout_ms=7000)
    enqueue(subject, 3)

    def round_(owner: str) -> Any:
        with subject.store.begin() as tx:
            return subject.store.claim_round(tx, ep, owner, 50, lambda e: e.timeout_ms / 1000)

    first = round_("c1")
    assert (first.endpoint.id, first.endpoint.timeout_ms) == (ep, 7000)
    assert first.circuit.state == CircuitState.CLOSED
    assert (len(first.claims), first.throttled) == (2, None)  # a full bucket: 2 tokens
    second = round_("c2")
    assert second.claims == [] and 0 < second.throttled <= 0.5  # the next token's wait
    with subject.store.begin() as tx:
        subject.store.set_circuit(tx, ep, Change(Circuit(CircuitState.OPEN, 5, 1.0, 0.0)))
        subject.store.finish_many(tx, [Sent(c, DeliveryState.PENDING) for c in first.claims])
    probe = round_("c3")
    [one] = probe.claims
    assert one.probe and probe.circuit.state == CircuitState.HALF_OPEN
    assert probe.circuit.probe_in == pytest.approx(7.0)  # half open until the lease ends
