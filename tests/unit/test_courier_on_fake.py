"""The courier against the in-memory outbox: its whole round through ``DeliveryStore`` alone.

A playbook step makes the deliveries (``ctx.send``), ``deliver_once`` sends them through a
stub client, and the outbox shows what the courier recorded: no database, no network.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from inbox import Playbook, StepContext
from inbox.domain.playbooks import Registry
from inbox.domain.records import EndpointId
from inbox.outbound.client import Response
from inbox.outbound.errors import DeliveryError
from inbox.services.courier import deliver_once
from inbox.testing import InMemoryStore, run_due

EP = EndpointId(7)


class Stub:
    """Answers each POST with the next of ``answers`` (a status, or an error to raise)."""

    def __init__(self, *answers: int | DeliveryError) -> None:
        self.answers: Iterator[int | DeliveryError] = iter(answers)
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []
        self.timeouts: list[float | None] = []

    def post(self, url: str, body: bytes, headers: Any, timeout: float | None = None) -> Response:
        self.sent.append((url, body, dict(headers)))
        self.timeouts.append(timeout)
        answer = next(self.answers)
        if isinstance(answer, DeliveryError):
            raise answer
        return Response(answer, {}, b"", 3.0)

    def close(self) -> None:
        pass


def outbox(messages: int, **endpoint: Any) -> InMemoryStore:
    """A store whose one event's step sent ``messages`` callbacks to endpoint 7."""
    store = InMemoryStore()
    store.add_endpoint(1, EP, **endpoint)
    pb = Playbook("notify")

    @pb.step("notify")
    def notify(ctx: StepContext) -> None:
        for n in range(messages):
            ctx.send("order.shipped", {"n": n})

    reg = Registry()
    reg.register(pb)
    store.add_event(b"{}")
    assert run_due(store, reg) == ["completed"]
    return store


def states(store: InMemoryStore) -> list[tuple[str, int]]:
    return [(d.state, d.attempts) for d in store.deliveries.all()]


def test_a_round_sends_in_order_and_records_each_outcome() -> None:
    store = outbox(3)
    client = Stub(200, 503, 200)
    result = deliver_once(store.deliveries, EP, client=client)
    assert (result.claimed, result.delivered, result.retried, result.lost) == (3, 2, 1, 0)
    assert states(store) == [("delivered", 1), ("pending", 1), ("delivered", 1)]
    sent_ids = [h["webhook-id"] for _, _, h in client.sent]
    assert sent_ids == [d.public_id for d in store.deliveries.all()]  # in order, stable ids
    assert [len(d.log) for d in store.deliveries.all()] == [1, 1, 1]
    assert client.timeouts == [5.0] * 3  # the endpoint's, whoever made the client
    assert deliver_once(store.deliveries, EP, client=Stub()).claimed == 0
    store.advance(max(result.retry_in))
    again = deliver_once(store.deliveries, EP, client=Stub(200))
    assert (again.claimed, again.delivered) == (1, 1)
    assert states(store)[1] == ("delivered", 2)


def test_an_unreachable_endpoint_hands_the_rest_back_unattempted() -> None:
    store = outbox(3)
    down = DeliveryError("refused")
    down.kind = "connect"
    result = deliver_once(store.deliveries, EP, client=Stub(down))
    assert (result.claimed, result.retried, result.released) == (3, 1, 2)
    assert states(store) == [("pending", 1), ("pending", 0), ("pending", 0)]
    assert store.data.endpoints[EP].failing
    store.deliveries.store.calls.clear()
    store.advance(max(result.retry_in))
    assert deliver_once(store.deliveries, EP, client=Stub(200, 200, 200)).delivered == 3
    assert not store.data.endpoints[EP].failing  # it answered: written back once
    assert store.deliveries.store.calls.count("set_failing") == 1
    quiet = outbox(2)  # a healthy endpoint's quiet round
    assert deliver_once(quiet.deliveries, EP, client=Stub(200, 200)).delivered == 2
    assert "set_failing" not in quiet.deliveries.store.calls  # nothing changed: not written


def test_410_gone_disables_the_endpoint() -> None:
    store = outbox(2)
    result = deliver_once(store.deliveries, EP, client=Stub(410))
    assert (result.failed, result.released) == (1, 1)
    ep = store.data.endpoints[EP]
    assert (ep.enabled, ep.disabled_reason) == (False, "the endpoint answered 410 Gone")
    assert deliver_once(store.deliveries, EP, client=Stub()).claimed == 0
