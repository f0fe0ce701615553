"""Deliveries as the alarms read them: when each endpoint's next retries are due."""

from __future__ import annotations

from sqlalchemy import Connection, text


def due_within(
    conn: Connection, horizon: float, slot: float, limit: int = 200
) -> list[tuple[int, float]]:
    """(endpoint, seconds until due) for each retry due in the next ``horizon`` seconds,
    rounded up to ``slot``; relative to the database clock."""
    rows = conn.execute(
        text(
            """
            SELECT DISTINCT d.endpoint_id,
                   ceil(extract(epoch FROM d.available_at - now()) / :slot) * :slot AS due_in
              FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id
             WHERE e.enabled AND NOT e.paused AND d.state = 'pending' AND d.available_at > now()
               AND d.available_at <= now() + make_interval(secs => :horizon)
             ORDER BY due_in LIMIT :limit
            """
        ),
        {"horizon": horizon, "slot": slot, "limit": limit},
    )
    return [(int(r.endpoint_id), float(r.due_in)) for r in rows]
