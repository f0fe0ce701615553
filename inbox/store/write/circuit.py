"""Endpoints' circuit breakers on their rows (the rule is ``inbox.domain.circuit``).

``read`` locks the endpoint's row: the courier's record takes it before any delivery row,
as the claim does (``inbox.store.write.courier_round``, which reads the circuit with the
rest of the row) and an operator's enable or pause does, so the three never wait on each
other in opposite orders. Times are the database's.
"""

from __future__ import annotations

import json

from sqlalchemy import Connection, text

from inbox.domain.circuit import Change, Circuit, CircuitState, Window
from inbox.domain.records import EndpointId


def read(conn: Connection, endpoint_id: EndpointId, lock: bool = True) -> Circuit:
    row = conn.execute(
        text(
            "SELECT circuit, circuit_failures, probe_backoff, circuit_window,"
            " extract(epoch FROM probe_at - now()) AS probe_in,"
            " extract(epoch FROM now()) AS clock FROM endpoints WHERE id = :e"
            + (" FOR UPDATE" if lock else "")
        ),
        {"e": endpoint_id},
    ).one()
    probe_in = float(row.probe_in) if row.probe_in is not None else None
    return Circuit(
        CircuitState(row.circuit),
        row.circuit_failures,
        row.probe_backoff,
        probe_in,
        Window.from_json(row.circuit_window),
        float(row.clock),
    )


# A close makes the endpoint's whole backlog due now, at one instant: a delivery whose
# retry was scheduled while the endpoint was down goes out with the others, and the claim
# (by due time, then id) takes them in the order they were made.
_DUE_NOW = text(
    "UPDATE deliveries SET available_at = now() WHERE endpoint_id = :e AND state = 'pending'"
)


def write(conn: Connection, endpoint_id: EndpointId, change: Change) -> None:
    c = change.circuit
    conn.execute(
        text(
            """
            UPDATE endpoints
               SET circuit = :state, circuit_failures = :failures, probe_backoff = :backoff,
                   circuit_window = CAST(:window AS jsonb),
                   probe_at = now() + make_interval(secs => CAST(:probe_in AS float8)),
                   circuit_changed_at = CASE WHEN circuit <> :state THEN now()
                                             ELSE circuit_changed_at END
             WHERE id = :e
            """
        ),
        {
            "e": endpoint_id,
            "state": c.state.value,
            "failures": c.failures,
            "backoff": c.backoff,
            "probe_in": c.probe_in,
            "window": json.dumps(c.window.to_json()),
        },
    )
    if change.closed:
        conn.execute(_DUE_NOW, {"e": endpoint_id})


def probing(conn: Connection, endpoint_id: EndpointId, lease: float) -> None:
    """A probe was claimed: half open until it answers, or its lease ends."""
    conn.execute(
        text(
            "UPDATE endpoints SET circuit = 'half_open', probe_at = now()"
            " + make_interval(secs => :lease),"
            " circuit_changed_at = CASE WHEN circuit <> 'half_open' THEN now()"
            " ELSE circuit_changed_at END WHERE id = :e"
        ),
        {"e": endpoint_id, "lease": lease},
    )
