"""Random interleavings of ordered lanes against PostgreSQL (``tests.lane_machine``): the
claim's SQL, the trigger that writes a quarantined event's lane block, the operator's
replay (``inbox.store.write.operator``) and skip (``inbox.store.write.lanes``). Each example
has a tenant of its own and removes its rows at its end."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from sqlalchemy import Engine, text

from inbox.domain.records import Claim
from inbox.store.write import lanes, operator
from inbox.store.write.work import SqlWorkStore
from tests.lane_machine import (
    MAX_ATTEMPTS,
    POISON,
    PROGRAMS,
    REPLAYED_WHILE_RUNNING,
    Row,
    run,
)


class Sql:
    def __init__(self, engine: Engine, source: Any) -> None:
        self.engine, self.source = engine, source
        self.store = SqlWorkStore(engine)

    def add(self, lane: bytes) -> int:
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    text(
                        "INSERT INTO events (public_id, tenant_id, source_id, content_type,"
                        " body, body_sha256, response_status, response_body, max_attempts,"
                        " business_key_digest, ordering_key) VALUES (:p, :t, :s,"
                        " 'application/json', '{}', '\\x00', 202, '', :m, :k, :k) RETURNING id"
                    ),
                    {
                        "p": f"evt_{uuid.uuid4().hex[:16]}",
                        "t": self.source.tenant_id,
                        "s": self.source.id,
                        "m": MAX_ATTEMPTS,
                        "k": lane,
                    },
                ).scalar_one()
            )

    def claim(self, limit: int) -> list[Claim]:
        with self.store.begin() as tx:
            return self.store.claim(tx, "w", limit, 30)

    def complete(self, c: Claim) -> None:
        with self.store.begin() as tx:
            self.store.complete(tx, c, "completed", {}, None, None)

    def fail(self, c: Claim, permanent: bool) -> None:
        with self.store.begin() as tx:
            self.store.fail(tx, c, ValueError("x"), permanent, 0.0)

    def expire_and_sweep(self, c: Claim) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE events SET lease_expires_at = now() - interval '1 s'"
                    " WHERE id = :id AND fence = :f AND state = 'processing'"
                ),
                {"id": c.id, "f": c.fence},
            )
        with self.store.begin() as tx:
            self.store.sweep_expired(tx)

    def _public(self, event_id: int) -> str:
        with self.engine.connect() as conn:
            q = text("SELECT public_id FROM events WHERE id = :id")
            return str(conn.execute(q, {"id": event_id}).scalar_one())

    def replay(self, event_id: int) -> None:
        public_id = self._public(event_id)
        with self.engine.begin() as conn:
            operator.replay(conn, [public_id], "op")

    def skip(self, event_id: int) -> None:
        public_id = self._public(event_id)
        with self.engine.begin() as conn:
            lanes.skip(conn, event_id, public_id, "op", "test", 1000)

    def rows(self) -> dict[int, Row]:
        with self.engine.connect() as conn:
            found = conn.execute(
                text(
                    "SELECT e.id, e.ordering_key, e.state, EXISTS (SELECT 1 FROM lane_blocks b"
                    " WHERE b.event_id = e.id AND b.skipped_at IS NOT NULL) AS skipped"
                    " FROM events e WHERE e.tenant_id = :t"
                ),
                {"t": self.source.tenant_id},
            )
            return {r.id: Row(bytes(r.ordering_key), r.state, r.skipped) for r in found}

    def remove(self) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                text("DELETE FROM lane_blocks WHERE tenant_id = :t"), {"t": self.source.tenant_id}
            )
            conn.execute(
                text("DELETE FROM events WHERE tenant_id = :t"), {"t": self.source.tenant_id}
            )


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=PROGRAMS)
@example(program=POISON)
@example(program=REPLAYED_WHILE_RUNNING)
def test_random_interleavings_keep_each_lane_in_order_in_postgresql(
    engine, make_source, program: list[tuple[Any, ...]]
) -> None:
    h = Sql(engine, make_source())
    try:
        run(h, program)
    finally:
        h.remove()
