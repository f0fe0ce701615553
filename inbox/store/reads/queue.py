"""The events' queue as the sweeper, the alarms and metrics read it: when the next retries
are due, which sources have held events (how many are due: ``inbox.store.write.queue``)."""

from __future__ import annotations

from sqlalchemy import Connection, text

from inbox.domain.records import SourceId
from inbox.store.db.days import DayBounded, open_days

# Held events are unfinished, so they lie in the open days (from the floor to tomorrow):
# the statement names those days alone, as the claim does.
_HELD_SOURCES = DayBounded(
    """
    SELECT s.id, s.options->>'playbook' AS playbook
      FROM sources s
     WHERE EXISTS (SELECT 1 FROM events e
                    WHERE e.source_id = s.id AND e.held_reason IS NOT NULL
                      AND e.id >= {lo} AND e.id < {hi})
    """
)


def held_playbooks(conn: Connection) -> dict[SourceId, str | None]:
    """The sources with held events, and the playbook each names now."""
    rows = conn.execute(_HELD_SOURCES.over(*open_days(conn)))
    return {SourceId(r.id): r.playbook for r in rows}


def due_within(conn: Connection, horizon: float, slot: float, limit: int = 100) -> list[float]:
    """Seconds until each retry due in the next ``horizon`` seconds, rounded up to ``slot``
    (one alarm per slot; relative to the database clock, so no clock needs to agree)."""
    rows = conn.execute(
        text(
            """
            SELECT DISTINCT ceil(extract(epoch FROM available_at - now()) / :slot) * :slot AS due_in
              FROM events
             WHERE state = 'received' AND available_at > now()
               AND available_at <= now() + make_interval(secs => :horizon)
             ORDER BY due_in LIMIT :limit
            """
        ),
        {"horizon": horizon, "slot": slot, "limit": limit},
    )
    return [float(r.due_in) for r in rows]
