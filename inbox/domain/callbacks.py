"""Outbound callbacks, the pure part: envelopes, Standard Webhooks signatures, retry policy.

Every attempt carries ``webhook-id`` (the delivery id, the same on every retry
and replay), ``webhook-timestamp`` (fresh per attempt) and ``webhook-signature``
(``v1,<base64>`` over ``id.timestamp.body``, one per active secret), and an
``Idempotency-Key`` equal to the delivery id, so a receiver can deduplicate.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from standardwebhooks import Webhook

from inbox.domain import filters
from inbox.domain.records import EndpointId, EventId, LoadedEvent, TenantId


@dataclass(frozen=True)
class Outgoing:
    """A message a playbook step asked to send; fanned out to the matching endpoints."""

    event_type: str
    data: Any
    created_at: datetime


@dataclass(frozen=True, slots=True)
class CallbackSet:
    """The callbacks one committed step decided, with what each of their deliveries carries:
    the unit the outbox writes, many to a commit (``WorkStore.enqueue_deliveries``)."""

    tenant_id: TenantId
    tenant: str
    event_id: EventId | None
    event_public_id: str
    step: str
    messages: Sequence[Outgoing]
    replay: int = 0  # the event's replay number while the step ran (``webhook-replay``)
    trace_context: str | None = None  # the step's span: each attempt continues it

    @classmethod
    def of(
        cls, ev: LoadedEvent, step: str, messages: Sequence[Outgoing], trace_context: str | None
    ) -> CallbackSet:
        """The callbacks ``step`` of the loaded event ``ev`` decided."""
        return cls(
            ev.tenant_id, ev.tenant, ev.id, ev.public_id, step, messages, ev.replay, trace_context
        )


class Route(StrEnum):
    """What the subscription rule makes of one callback for one endpoint."""

    OWED = "owed"  # subscribed to its type and passed by its filter: a delivery is owed
    FILTERED = "filtered"  # subscribed to its type, refused by the endpoint's filter
    UNSUBSCRIBED = "unsubscribed"  # not one of the endpoint's event types


class Subscriber(Protocol):
    """The part of an endpoint the subscription rule reads."""

    @property
    def event_types(self) -> Sequence[str] | None: ...

    @property
    def filter(self) -> str | None: ...


class Subscribing(Subscriber, Protocol):
    """An endpoint as ``fan_out`` reads it: its id and its subscription."""

    @property
    def id(self) -> int: ...


def route(ep: Subscriber, event_type: str, data: Any) -> Route:
    """The one subscription rule, whatever the endpoint's state: its event types (None:
    every type), then its CEL filter (``inbox.domain.filters``). An endpoint's state
    decides when a callback is attempted, never whether it is owed."""
    if ep.event_types is not None and event_type not in ep.event_types:
        return Route.UNSUBSCRIBED
    if ep.filter is not None and not filters.endpoint_matches(ep.filter, event_type, data):
        return Route.FILTERED
    return Route.OWED


@dataclass(frozen=True, slots=True)
class Owed:
    """One delivery a callback set owes one endpoint."""

    public_id: str
    cbs: CallbackSet
    message: Outgoing
    endpoint_id: EndpointId

    def body(self) -> bytes:
        msg = self.message
        return envelope(self.public_id, msg.event_type, self.cbs.tenant, msg.data, msg.created_at)


def fan_out(
    sets: Sequence[CallbackSet], endpoints: Mapping[TenantId, Sequence[Subscribing]]
) -> tuple[list[Owed], dict[str, int]]:
    """Every delivery ``sets`` owe their tenants' ``endpoints`` (each with ``id``,
    ``event_types`` and ``filter``, in id order), in message order; and how many callbacks
    each tenant's filters refused."""
    owed: list[Owed] = []
    filtered: dict[str, int] = {}

    def each() -> Iterator[tuple[CallbackSet, int, Outgoing, Subscribing]]:
        for cbs in sets:
            for index, msg in enumerate(cbs.messages):
                for ep in endpoints.get(cbs.tenant_id, ()):
                    yield cbs, index, msg, ep

    for cbs, index, msg, ep in each():
        way = route(ep, msg.event_type, msg.data)
        if way is Route.OWED:
            msg_id = delivery_id(cbs.event_public_id, cbs.step, index, ep.id)
            owed.append(Owed(msg_id, cbs, msg, EndpointId(ep.id)))
        elif way is Route.FILTERED:
            filtered[cbs.tenant] = filtered.get(cbs.tenant, 0) + 1
    return owed, filtered


def delivery_id(event_public_id: str, step: str, index: int, endpoint_id: int) -> str:
    """Stable: derived from our own ids, so a re-run step makes the same delivery."""
    raw = f"{event_public_id}|{step}|{index}|{endpoint_id}".encode()
    return "msg_" + hashlib.sha256(raw).hexdigest()[:24]


def envelope(msg_id: str, event_type: str, tenant: str, data: Any, created_at: datetime) -> bytes:
    doc = {
        "id": msg_id,
        "type": event_type,
        "tenant": tenant,
        "created_at": created_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "data": data,
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def headers(
    msg_id: str, body: bytes, active_secrets: list[str], now: datetime, replay: int = 0
) -> dict[str, str]:
    """The Standard Webhooks headers for one attempt (the library does the HMAC).

    A callback made by a step that ran during the event's N-th operator replay also
    carries ``webhook-replay: N``, so the receiver can tell it from the original. The
    signature covers ``id.timestamp.body`` only, so verifiers are unaffected by it.
    """
    text = body.decode()
    signatures = " ".join(Webhook(s).sign(msg_id, now, text) for s in active_secrets)
    out = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signatures,
        "idempotency-key": msg_id,
        "user-agent": "webhook-inbox",
    }
    if replay:
        out["webhook-replay"] = str(replay)
    return out


@dataclass(frozen=True)
class Verdict:
    delivered: bool = False
    retry: bool = False
    disable_endpoint: bool = False
    retry_after: float | None = None


MAX_RETRY_AFTER = 3600.0


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return min(MAX_RETRY_AFTER, max(0.0, float(value)))
    except ValueError:
        try:
            from email.utils import parsedate_to_datetime

            when = parsedate_to_datetime(value)
            return min(MAX_RETRY_AFTER, max(0.0, (when - datetime.now(UTC)).total_seconds()))
        except (TypeError, ValueError):
            return None


def judge_status(status: int, retry_after: str | None = None) -> Verdict:
    """What an HTTP answer means: retry only what a retry can fix."""
    if 200 <= status < 300:
        return Verdict(delivered=True)
    if status == 410:
        return Verdict(disable_endpoint=True)  # Gone: the receiver asks us to stop
    if status in (408, 429) or status >= 500:
        return Verdict(retry=True, retry_after=_retry_after(retry_after))
    return Verdict()  # other 4xx, and 3xx (redirects are not followed): terminal


RETRYABLE_ERRORS = frozenset({"timeout", "connect", "dns"})


def judge_error(kind: str) -> Verdict:
    return Verdict(retry=kind in RETRYABLE_ERRORS)


def retry_delay(schedule: list[int], attempt: int, rand: random.Random | None = None) -> float:
    """The schedule's delay after failed attempt ``attempt`` (1-based), with ±20 % jitter."""
    base = schedule[min(attempt, len(schedule)) - 1] if schedule else 5
    return float(base) * (0.8 + 0.4 * (rand or random).random())
