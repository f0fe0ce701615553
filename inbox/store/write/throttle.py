"""Failed authentications per client address, in fixed windows (table ``auth_failures``).

Why the database and not Redis or process memory: the count must hold across every web
process and host, or an attacker spreads guesses over them; the database is always there
(Redis is optional here), and only failures write, so the cost falls on the guesser.
"""

from __future__ import annotations

import math

from sqlalchemy import Connection, text


def blocked_for(conn: Connection, kind: str, client: str, limit: int, window: int) -> int:
    """Seconds until ``client`` may try again (0: it may now)."""
    left = conn.execute(
        text(
            "SELECT extract(epoch FROM window_started + make_interval(secs => :w) - now())"
            " FROM auth_failures WHERE kind = :k AND client = :c AND failures >= :n"
        ),
        {"k": kind, "c": client, "n": limit, "w": window},
    ).scalar()
    return max(0, math.ceil(float(left))) if left is not None else 0


def record_failure(conn: Connection, kind: str, client: str, window: int) -> int:
    """Count one failure; returns the failures in the current window."""
    count = conn.execute(
        text(
            "INSERT INTO auth_failures AS f (kind, client, window_started, failures)"
            " VALUES (:k, :c, now(), 1)"
            " ON CONFLICT (kind, client) DO UPDATE SET"
            " window_started = CASE WHEN f.window_started < now() - make_interval(secs => :w)"
            "   THEN now() ELSE f.window_started END,"
            " failures = CASE WHEN f.window_started < now() - make_interval(secs => :w)"
            "   THEN 1 ELSE f.failures + 1 END"
            " RETURNING failures"
        ),
        {"k": kind, "c": client, "w": window},
    ).scalar_one()
    conn.execute(  # old windows of anyone: the table holds only recent failures
        text("DELETE FROM auth_failures WHERE window_started < now() - make_interval(secs => :w)"),
        {"w": max(window, 3600)},
    )
    return int(count)
