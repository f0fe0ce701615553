"""The courier's store over PostgreSQL: ``inbox.services.ports.DeliveryStore``.

``begin`` is the engine's transaction; every other method is a statement of
``deliveries`` or ``endpoints`` called with it. ``inbox.testing.InMemoryDeliveries`` is the
same port in memory; ``tests/integration/test_delivery_store_contract.py`` holds the two to
the same answers.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from sqlalchemy import Connection, Engine

from inbox.domain.records import Endpoint, EndpointId
from inbox.store.reads import endpoints as endpoints_reads
from inbox.store.write import circuit as circuits
from inbox.store.write import deliveries, endpoint_rate, endpoints


class SqlDeliveryStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def begin(self) -> AbstractContextManager[Connection]:
        return self.engine.begin()

    @staticmethod
    def endpoint(conn: Connection, endpoint_id: EndpointId) -> Endpoint:
        return endpoints_reads.get_endpoint(conn, endpoint_id)

    @staticmethod
    def disable(conn: Connection, endpoint_id: EndpointId, reason: str) -> None:
        endpoints.set_enabled(conn, endpoint_id, False, reason)

    claim = staticmethod(deliveries.claim)
    claim_round = staticmethod(deliveries.claim_round)
    circuit = staticmethod(circuits.read)
    throttled = staticmethod(endpoint_rate.wait)
    set_circuit = staticmethod(circuits.write)
    finish_many = staticmethod(deliveries.finish_many)
    release = staticmethod(deliveries.release)
    set_failing = staticmethod(deliveries.set_failing)
    sweep = staticmethod(deliveries.sweep)
