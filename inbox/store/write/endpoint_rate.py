"""Endpoints' rate limits: the token bucket on each endpoint's row (the rule is
``inbox.domain.throttle``). Called under the row's lock, which the claim holds, so every
courier process takes from one bucket. Times are the database's."""

from __future__ import annotations

from sqlalchemy import Connection, text

from inbox.domain import throttle
from inbox.domain.records import EndpointId
from inbox.domain.throttle import Bucket


def _row(conn: Connection, endpoint_id: EndpointId) -> tuple[float | None, float, float | None]:
    row = conn.execute(
        text(
            "SELECT rate_per_second, rate_tokens, extract(epoch FROM now() - rate_at) AS elapsed"
            " FROM endpoints WHERE id = :e"
        ),
        {"e": endpoint_id},
    ).one()
    elapsed = float(row.elapsed) if row.elapsed is not None else None
    return row.rate_per_second, float(row.rate_tokens), elapsed


def take(conn: Connection, endpoint_id: EndpointId, wanted: int) -> Bucket | None:
    """What a claim of up to ``wanted`` may lease now; None when the endpoint has no limit."""
    rate, tokens, elapsed = _row(conn, endpoint_id)
    if rate is None or rate <= 0:
        return None
    return throttle.take(rate, tokens, elapsed, wanted)


def spend(conn: Connection, endpoint_id: EndpointId, bucket: Bucket, leased: int) -> None:
    """Keep what is left: the claim's tokens it did not lease go back in the bucket."""
    left = bucket.tokens + (bucket.allowed - leased)
    conn.execute(
        text("UPDATE endpoints SET rate_tokens = :t, rate_at = now() WHERE id = :e"),
        {"e": endpoint_id, "t": left},
    )


def wait(conn: Connection, endpoint_id: EndpointId) -> float | None:
    """Seconds until the endpoint's next token, when its bucket is empty; else None."""
    rate, tokens, elapsed = _row(conn, endpoint_id)
    if rate is None or rate <= 0:
        return None
    return throttle.take(rate, tokens, elapsed, 1).wait


def set_rate(conn: Connection, endpoint_id: EndpointId, rate: float | None) -> None:
    conn.execute(
        text(
            "UPDATE endpoints SET rate_per_second = :r, rate_tokens = 0, rate_at = NULL"
            " WHERE id = :e"
        ),
        {"e": endpoint_id, "r": rate},
    )
