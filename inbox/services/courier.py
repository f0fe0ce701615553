"""Sending deliveries: one endpoint's due deliveries, one after another, over one connection.

``deliver_once`` is the body of the courier task; tests call it directly.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Engine

from inbox.domain import callbacks, circuit
from inbox.domain.outcomes import DeliveryOutcome
from inbox.domain.records import ClaimedDelivery, Endpoint, EndpointId
from inbox.domain.states import DeliveryState, transition
from inbox.infra import metrics, tracing
from inbox.infra.config import Settings
from inbox.outbound.client import Client, DeliveryError
from inbox.services.ports import DeliveryStore
from inbox.services.wiring import delivery_store

log = logging.getLogger(__name__)
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
    retry_in: list[float] = field(default_factory=list)  # seconds until each retry is due
    busy: int = 0  # another courier held the endpoint: no slot, not waited for
    opened: int = 0  # the endpoint's circuit opened in this round
    closed: int = 0  # ... or closed: its whole backlog is due now
    ring: int = 0  # more couriers to ring now (a closed circuit's backlog drains in parallel)


# What each new state counts as, in CourierResult and the attempts metric.
_OUTCOME = {
    DeliveryState.DELIVERED: DeliveryOutcome.DELIVERED,
    DeliveryState.PENDING: DeliveryOutcome.RETRIED,
    DeliveryState.FAILED: DeliveryOutcome.FAILED,
}

DEFAULT_POLICY = circuit.Policy()
FLUSH_EVERY = 10
LEASE_SPARE = 1.0  # seconds of a lease kept free after an attempt's timeout
FLUSH_SECONDS = 0.2
BUSY_AGAIN = 0.5  # seconds: a courier that found its endpoint held rings again after this


@dataclass
class _Known:
    """What this round knows of its endpoint's row: ``failing`` as last read or written."""

    failing: bool


@dataclass(frozen=True)
class Sent:
    """One attempt's result, waiting to be recorded with the others of its round."""

    claim: ClaimedDelivery
    at: datetime
    status: int | None
    error: str | None
    latency_ms: float
    excerpt: str | None
    state: DeliveryState  # delivered | pending (retry) | failed (dead letter)
    delay: float
    disable: bool  # 410 Gone
    unreachable: bool  # timeout, refused, reset, DNS: stop this round
    retryable: bool = False  # a failure a retry can fix: counts against the circuit
    retry_after: float | None = None  # what a 429 or 503 asked, in seconds

    @property
    def signal(self) -> circuit.Outcome:
        """What this attempt says about the endpoint, to its circuit breaker."""
        return circuit.Outcome(self.retryable, self.retry_after)

    @property
    def outcome(self) -> DeliveryOutcome:
        if self.error == "blocked":
            return DeliveryOutcome.BLOCKED
        return _OUTCOME[self.state]


def deliver_once(
    db: Engine | DeliveryStore[Any],
    endpoint_id: EndpointId,
    client: Client | None = None,
    owner: str | None = None,
    allow_private: bool = False,
    lease_seconds: float = 60.0,
    policy: circuit.Policy = DEFAULT_POLICY,
) -> CourierResult:
    """Claim up to a batch of this endpoint's due deliveries and send them in order.

    Results are recorded every few deliveries (or 200 ms) in one transaction; a
    crash before that re-sends them with the same webhook-id, which the receiver
    deduplicates. After a timeout or connection failure the rest of the batch is
    handed back unattempted and the endpoint is marked failing (one courier at a
    time until it answers again): a dead endpoint costs one timeout per round and
    one worker thread, not one per delivery or per slot.

    The endpoint's circuit breaker (``inbox.domain.circuit``) decides whether deliveries go
    out one by one (closed), or one probe at a time (open): the round stops where an
    attempt opens it, and hands the rest back unattempted. A probe's success closes it:
    the backlog is due at once and ``ring`` says how many more couriers to ring.
    """
    store = delivery_store(db)
    owner = owner or f"courier-{uuid.uuid4().hex[:12]}"
    started = time.monotonic()

    def lease_for(ep: Endpoint) -> float:
        # A lease outlives at least one attempt: a slow endpoint's delivery is never
        # handed to another courier while its answer is still on the way.
        # And it leaves a round room for more than one: were the lease only the timeout
        # and its spare, the round's last start would be its first, and a short
        # INBOX_LEASE_SECONDS beside a long timeout sent one delivery a round.
        return max(float(lease_seconds), 2 * ep.timeout_ms / 1000 + LEASE_SPARE)

    with store.begin() as tx:
        found = store.claim_round(tx, endpoint_id, owner, BATCH, lease_for)
    if found is None:
        # Another courier holds the endpoint (claiming or recording): no slot now, and no
        # wait for one. Its claim takes what was due when it ran; a ring a moment later
        # takes what was made since.
        return CourierResult(busy=1, retry_in=[BUSY_AGAIN])
    ep, now, claims = found.endpoint, found.circuit, found.claims
    lease = lease_for(ep)
    result = CourierResult(claimed=len(claims))
    if not claims:
        if now.state != circuit.CircuitState.CLOSED and now.probe_in is not None:
            result.retry_in.append(max(0.0, now.probe_in))  # the probe's alarm
        elif found.throttled is not None:
            result.retry_in.append(found.throttled)  # its rate limit's next token
        return result
    # Closed and nothing failing when claimed: a round of successes changes nothing of
    # the circuit, so recording it need not lock the endpoint's row.
    clean = now.quiet and not ep.failing
    known = _Known(ep.failing)
    own_client = client is None
    client = client or Client(timeout=ep.timeout_ms / 1000, allow_private=allow_private)
    timeout = ep.timeout_ms / 1000
    sent: list[Sent] = []
    flushed = time.monotonic()
    # The last moment to start an attempt that ends (at the endpoint's timeout) inside the
    # lease; past it the rest are handed back unattempted and rung again at once.
    last_start = started + lease - ep.timeout_ms / 1000 - LEASE_SPARE
    try:
        for i, c in enumerate(claims):
            if i and time.monotonic() > last_start:
                _record(store, ep, sent, result, policy, clean, known)
                sent, flushed = [], time.monotonic()
                rest = claims[i:]
                with store.begin() as tx:
                    store.release(tx, rest, 0.0)
                result.released = len(rest)
                result.retry_in.append(0.0)
                break
            one = _send(client, ep, c, timeout)
            sent.append(one)
            opens = circuit.stops(now, one.signal, policy)
            now = circuit.step(now, one.signal, policy)
            clean = clean and not one.retryable  # the rest of the round is recorded in full
            stop = one.unreachable or one.disable or (one.status == 429) or opens
            # Ordered: the next waits until this one is delivered or dead.
            stop = stop or (ep.ordered and one.state == DeliveryState.PENDING)
            if stop or len(sent) >= FLUSH_EVERY or time.monotonic() - flushed > FLUSH_SECONDS:
                _record(store, ep, sent, result, policy, clean, known)
                sent, flushed = [], time.monotonic()
            if stop:
                rest = claims[i + 1 :]
                with store.begin() as tx:
                    store.release(tx, rest, 0.0 if one.disable else one.delay)
                result.released = len(rest)
                if rest and not one.disable:
                    result.retry_in.append(one.delay)
                break
    finally:
        _record(store, ep, sent, result, policy, clean, known)
        if own_client:
            client.close()
    return result


def policy_of(settings: Settings) -> circuit.Policy:
    """The circuit breaker's policy from ``INBOX_CIRCUIT_*``."""
    probe_max = max(DEFAULT_POLICY.probe_min, settings.circuit_probe_max_seconds)
    return circuit.Policy(
        failures=max(1, settings.circuit_failures),
        probe_max=probe_max,
        failure_rate=min(1.0, max(0.0, settings.circuit_failure_rate)),
        window=max(1.0, settings.circuit_window_seconds),
        min_attempts=max(1, settings.circuit_min_attempts),
    )


def _send(client: Client, ep: Endpoint, c: ClaimedDelivery, timeout: float) -> Sent:
    """One attempt as a client span of the event's trace (its context goes out with it)."""
    with tracing.span(
        "POST", "CLIENT", parent=c.trace_context
    ) as current:  # the OTel HTTP client span name: the method
        one = _attempt(client, ep, c, timeout)
        if current is not None:
            current.set_attributes(_span_attributes(ep, c, one))
            if one.state != DeliveryState.DELIVERED:
                tracing.failed(current, one.error or "failed")
    if one.state != DeliveryState.DELIVERED:
        _log_failed(ep, c, one)
    return one


def _attempt(client: Client, ep: Endpoint, c: ClaimedDelivery, timeout: float) -> Sent:
    """Send one delivery and judge the answer (no database work here)."""
    now = datetime.now(UTC)
    if c.body is None:  # its event's key was destroyed by an erasure: nothing to send
        return Sent(
            claim=c,
            at=now,
            status=None,
            error="payload erased",
            latency_ms=0.0,
            excerpt=None,
            state=transition(DeliveryState.SENDING, DeliveryState.FAILED),
            delay=0.0,
            disable=False,
            unreachable=False,
        )
    hdrs = callbacks.headers(c.public_id, c.body, list(ep.secrets), now, c.replay)
    tracing.inject(hdrs)  # traceparent: the tenant's system continues the event's trace
    status: int | None = None
    error: str | None = None
    excerpt: str | None = None
    latency = 0.0
    try:
        resp = client.post(ep.url, c.body, hdrs, timeout=timeout)
        status, latency, excerpt = resp.status, resp.latency_ms, redact_excerpt(resp.body_excerpt)
        verdict = callbacks.judge_status(resp.status, resp.headers.get("retry-after"))
    except DeliveryError as exc:
        error = exc.kind
        verdict = callbacks.judge_error(exc.kind)
    exhausted = c.attempts >= ep.max_attempts  # a probe's attempt is not counted
    if verdict.delivered:
        state, delay = DeliveryState.DELIVERED, 0.0
    elif verdict.retry and not exhausted:
        state = DeliveryState.PENDING
        delay = (
            verdict.retry_after
            if verdict.retry_after is not None
            else callbacks.retry_delay(list(ep.retry_schedule), c.attempts)
        )
    else:
        state, delay = DeliveryState.FAILED, 0.0
    return Sent(
        claim=c,
        at=now,
        status=status,
        error=error or _status_error(status, state),
        latency_ms=latency,
        excerpt=excerpt,
        state=transition(DeliveryState.SENDING, state),  # the claim left it sending
        delay=delay,
        disable=verdict.disable_endpoint,
        unreachable=error is not None and verdict.retry,
        retryable=verdict.retry,
        retry_after=verdict.retry_after,
    )


def _span_attributes(ep: Endpoint, c: ClaimedDelivery, one: Sent) -> dict[str, str | int]:
    """HTTP client semantic conventions, the URL without its query or credentials."""
    url = urlsplit(ep.url)
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:  # refused by the client as well: the attempt says so
        port = 0
    out: dict[str, str | int] = {
        "http.request.method": "POST",
        "url.full": f"{url.scheme}://{url.hostname}:{port}{url.path}",
        "server.address": url.hostname or "",
        "server.port": port,
        "inbox.tenant": ep.tenant,
        "inbox.endpoint": ep.public_id,
        "inbox.delivery_id": c.public_id,
        "inbox.attempt": c.attempts,
        "inbox.outcome": one.outcome,
    }
    if one.status is not None:
        out["http.response.status_code"] = one.status
    return out


def _log_failed(ep: Endpoint, c: ClaimedDelivery, one: Sent) -> None:
    """Every failed delivery attempt: a warning while it will be retried, else an error."""
    retry = one.state == DeliveryState.PENDING
    log.log(
        logging.WARNING if retry else logging.ERROR,
        "delivery %s attempt %d to endpoint %s failed (%s): %s",
        c.public_id,
        c.attempts,
        ep.public_id,
        one.error,
        f"retry in {one.delay:.0f} s" if retry else one.outcome,
        extra={
            "delivery_id": c.public_id,
            "tenant": ep.tenant,
            "endpoint": ep.public_id,
            "attempt": c.attempts,
            "status": one.status,
            "error_class": one.error,
            "outcome": one.outcome if not retry else "retry",
            "excerpt": one.excerpt,
        },
    )


def _record(
    store: DeliveryStore[Any],
    ep: Endpoint,
    sent: list[Sent],
    result: CourierResult,
    policy: circuit.Policy,
    clean: bool = False,
    known: _Known | None = None,
) -> None:
    """Record a round's attempts and outcomes in one transaction; fenced per delivery. The
    endpoint's circuit takes them in under its row's lock, taken first, unless the round
    was all successes of a ``clean`` claim (closed, nothing failing): then nothing of the
    endpoint's row changes. ``failing`` is written only when it differs from what the
    round last read or wrote (``known``)."""
    if not sent:
        return
    quiet = clean and not any(s.retryable or s.disable or s.unreachable for s in sent)
    change = circuit.Change(circuit.Circuit())
    with store.begin() as tx:
        before = circuit.Circuit() if quiet else store.circuit(tx, ep.id)
        kept = store.finish_many(tx, sent)
        if any(s.disable for s in sent):
            store.disable(tx, ep.id, "the endpoint answered 410 Gone")
        _mark_failing(store, tx, ep, sent, known)
        if not quiet:
            change = circuit.after(before, [s.signal for s in sent], policy)
            if change.circuit != before:
                store.set_circuit(tx, ep.id, change)
    if change.opened:
        result.opened += 1
        metrics.record_circuit_transition(ep.tenant, "open")
    if change.closed:
        result.closed += 1
        result.ring = ep.max_in_flight
        metrics.record_circuit_transition(ep.tenant, "closed")
    if change.circuit.probe_in is not None and change.circuit.state != "closed":
        result.retry_in.append(change.circuit.probe_in)
    for s in sent:
        if s.claim.id not in kept:
            result.lost += 1  # the sweeper gave it to another courier: it is re-sent
            metrics.record_delivery_attempt(ep.tenant, DeliveryOutcome.LOST)
            continue
        name = _OUTCOME[s.state]
        setattr(result, name, getattr(result, name) + 1)
        if s.state == "pending":
            result.retry_in.append(s.delay)
        metrics.record_delivery_attempt(ep.tenant, s.outcome)
    sent.clear()


def _mark_failing(
    store: DeliveryStore[Any], tx: Any, ep: Endpoint, sent: list[Sent], known: _Known | None
) -> None:
    """Failing when nothing answered or the last attempt found it unreachable; written
    only when that differs from what the round last read or wrote."""
    answered = any(s.status is not None for s in sent)
    failing = not answered or sent[-1].unreachable
    if known is None or known.failing != failing:
        store.set_failing(tx, ep.id, failing=failing)
        if known is not None:
            known.failing = failing


def _status_error(status: int | None, state: DeliveryState) -> str | None:
    if state == DeliveryState.DELIVERED or status is None:
        return None
    return f"HTTP {status}"
