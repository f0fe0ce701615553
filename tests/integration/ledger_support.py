"""Rows put straight into a day's ledger partitions, with the ids that day carries (the
``made_days`` fixture in conftest.py makes and drops the partitions)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import text

from inbox.domain import ledger


def put_event(conn, day: dt.date, n: int, src, state: str) -> tuple[int, str]:
    """Event ``n`` of ``day`` (with a step and a failed attempt): its id and public id."""
    event_id = ledger.make_id(day, n)
    public_id = ledger.public_id("evt_", day, f"{n:016x}")
    conn.execute(
        text(
            "INSERT INTO events (id, public_id, tenant_id, source_id, content_type, body,"
            " body_sha256, response_status, response_body, state)"
            " VALUES (:id, :p, :t, :s, 'application/json', '{}', '\\x00', 202, '', :state)"
        ),
        {"id": event_id, "p": public_id, "t": src.tenant_id, "s": src.id, "state": state},
    )
    conn.execute(
        text("INSERT INTO steps (event_id, name, attempt) VALUES (:e, 'record', 1)"),
        {"e": event_id},
    )
    conn.execute(
        text(
            "INSERT INTO event_attempts (event_id, attempt, error_class, outcome)"
            " VALUES (:e, 1, 'RuntimeError', 'retry')"
        ),
        {"e": event_id},
    )
    return event_id, public_id


def put_delivery(conn, day: dt.date, n: int, src, event_id: int, state: str) -> str:
    """Delivery ``n`` of ``day`` (with one attempt) for ``event_id``: its webhook-id."""
    delivery_id, public_id = ledger.make_id(day, n), f"msg_{day:%Y%m%d}_{n}"
    ep = conn.execute(
        text(
            "INSERT INTO endpoints (public_id, tenant_id, url) VALUES (:p, :t, 'https://x.test')"
            " RETURNING id"
        ),
        {"p": f"ep_{day:%Y%m%d}_{n}", "t": src.tenant_id},
    ).scalar_one()
    conn.execute(
        text(
            "INSERT INTO deliveries (id, public_id, tenant_id, endpoint_id, event_id,"
            " event_type, body, state) VALUES (:id, :p, :t, :ep, :e, 'x', '{}', :state)"
        ),
        {
            "id": delivery_id,
            "p": public_id,
            "t": src.tenant_id,
            "ep": ep,
            "e": event_id,
            "state": state,
        },
    )
    conn.execute(
        text("INSERT INTO delivery_attempts (delivery_id, latency_ms) VALUES (:d, 5)"),
        {"d": delivery_id},
    )
    return public_id
