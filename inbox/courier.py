"""Sending deliveries: one endpoint's due deliveries, one after another, over one connection.

``deliver_once`` is the body of the courier task; tests call it directly.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine

from inbox import callbacks, metrics
from inbox.errors import LeaseLost
from inbox.outbound.http import Client, DeliveryError
from inbox.store import deliveries as store
from inbox.store.endpoints import Endpoint, get_endpoint, set_enabled

BATCH = 50
_SECRETISH = re.compile(
    r"(?i)(\"?(?:secret|token|password|passwd|api[_-]?key|authorization)\"?\s*[:=]\s*)"
    r"(\"[^\"]*\"|[^\s,}&]+)"
)
_LONG_TOKEN = re.compile(r"[A-Za-z0-9+/_\-]{24,}")


def redact_excerpt(raw: bytes, limit: int = 200) -> str:
    """A short excerpt of an answer, without anything that looks like a credential."""
    text = raw[: limit * 2].decode("utf-8", "replace")
    text = _SECRETISH.sub(lambda m: m.group(1) + '"[redacted]"', text)
    return _LONG_TOKEN.sub("[redacted]", text)[:limit]


@dataclass
class CourierResult:
    claimed: int = 0
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    released: int = 0
    lost: int = 0


def deliver_once(
    engine: Engine,
    endpoint_id: int,
    client: Client | None = None,
    owner: str | None = None,
    allow_private: bool = False,
    lease_seconds: float = 60.0,
) -> CourierResult:
    """Claim up to a batch of this endpoint's due deliveries and send them in order.

    After a timeout or connection failure the rest of the batch is handed back
    unattempted: a dead endpoint costs one timeout per round, not one per delivery.
    """
    owner = owner or f"courier-{uuid.uuid4().hex[:12]}"
    with engine.begin() as conn:
        ep = get_endpoint(conn, endpoint_id)
        claims = store.claim(conn, endpoint_id, owner, BATCH, lease_seconds)
    result = CourierResult(claimed=len(claims))
    if not claims:
        return result
    own_client = client is None
    client = client or Client(timeout=ep.timeout_ms / 1000, allow_private=allow_private)
    try:
        for i, c in enumerate(claims):
            outcome, delay = _attempt(engine, client, ep, c)
            setattr(result, outcome, getattr(result, outcome) + 1)
            if outcome == "retried" and delay is not None and i + 1 < len(claims):
                rest = claims[i + 1 :]
                with engine.begin() as conn:
                    store.release(conn, rest, delay)
                result.released = len(rest)
                break
            if outcome == "failed" and not _still_enabled(engine, endpoint_id):
                rest = claims[i + 1 :]
                with engine.begin() as conn:
                    store.release(conn, rest, 0)
                result.released = len(rest)
                break
    finally:
        if own_client:
            client.close()
    return result


def _still_enabled(engine: Engine, endpoint_id: int) -> bool:
    with engine.connect() as conn:
        return get_endpoint(conn, endpoint_id).enabled


def _attempt(
    engine: Engine, client: Client, ep: Endpoint, c: store.Claimed
) -> tuple[str, float | None]:
    """Send one delivery; returns (what became of it, circuit delay or None)."""
    hdrs = callbacks.headers(c.public_id, c.body, list(ep.secrets), datetime.now(UTC))
    status: int | None = None
    error: str | None = None
    excerpt: str | None = None
    latency = 0.0
    circuit = False
    try:
        resp = client.post(ep.url, c.body, hdrs)
        status, latency, excerpt = resp.status, resp.latency_ms, redact_excerpt(resp.body_excerpt)
        verdict = callbacks.judge_status(resp.status, resp.headers.get("retry-after"))
    except DeliveryError as exc:
        error = exc.kind
        verdict = callbacks.judge_error(exc.kind)
        circuit = verdict.retry  # the endpoint is unreachable: stop this round
    exhausted = c.attempts >= ep.max_attempts
    if verdict.delivered:
        state, delay = "delivered", 0.0
    elif verdict.retry and not exhausted:
        state = "pending"
        delay = (
            verdict.retry_after
            if verdict.retry_after is not None
            else callbacks.retry_delay(list(ep.retry_schedule), c.attempts)
        )
    else:
        state, delay = "failed", 0.0
    try:
        with engine.begin() as conn:
            store.record_attempt(conn, c, status, error, latency, excerpt)
            store.finish(conn, c, state, status, error or _status_error(status, state), delay)
            if verdict.disable_endpoint:
                set_enabled(conn, ep.id, False, "the endpoint answered 410 Gone")
    except LeaseLost:
        metrics.record_delivery_attempt(ep.tenant, "lost")
        return "lost", None  # the sweeper gave it to another courier: it will be re-sent
    outcome = {"delivered": "delivered", "pending": "retried", "failed": "failed"}[state]
    metrics.record_delivery_attempt(ep.tenant, "blocked" if error == "blocked" else outcome)
    return outcome, (delay if circuit or status == 429 else None)


def _status_error(status: int | None, state: str) -> str | None:
    if state == "delivered" or status is None:
        return None
    return f"HTTP {status}"
