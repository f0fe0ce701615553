"""Stale events: the provider's own time or version of an event, and what is older.

A source may name where its provider puts the event's time (``occurred_at_path``) or
version (``version_path``) in the body. An event whose position is older than that of
the newest *completed* event with the same business key is stale: it completes with
outcome ``stale``, steps marked ``skip_if_stale`` do not run, and ``ctx.newer`` names
the newer event. Equal positions are not stale. An event without a position (no path
configured, the value absent, or no business key) is never judged.

Pure: imports no framework or driver.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from inbox.domain import jsonpath
from inbox.domain.errors import BadRequest


@dataclass(frozen=True)
class Position:
    """Where an event stands among the facts about its business key: one of the two."""

    occurred_at: datetime | None = None
    version: Decimal | None = None

    def newer_than(self, other: Position) -> bool:
        if self.occurred_at is not None and other.occurred_at is not None:
            return self.occurred_at > other.occurred_at
        if self.version is not None and other.version is not None:
            return self.version > other.version
        return False


@dataclass(frozen=True)
class Newer:
    """The newer completed event a stale event yields to (``ctx.newer``)."""

    public_id: str
    occurred_at: datetime | None
    version: Decimal | None


# How soon an event that found another with its business key running comes back.
RETRY_SECONDS = 0.2


@dataclass(frozen=True)
class Judgement:
    """An event judged against the newest completed event with its business key.

    ``busy``: another event with the key is running; this one was put back (due again in
    ``RETRY_SECONDS``). ``newer``: the newer completed event, when this one is stale.
    """

    busy: bool = False
    newer: Newer | None = None

    @property
    def stale(self) -> bool:
        return self.newer is not None


def parse_time(value: Any) -> datetime:
    """ISO 8601 (``Z`` allowed; no offset means UTC) or seconds since the epoch."""
    if isinstance(value, bool):
        raise ValueError("not a time")
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    text = str(value).strip()
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except ValueError:
        pass
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def parse_version(value: Any) -> Decimal:
    """A number (or a numeric string): versions compare as numbers, 10 after 9."""
    if isinstance(value, bool):
        raise ValueError("not a version")
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError("not a version") from None
    if not number.is_finite():
        raise ValueError("not a version")
    return number


def configured(options: dict[str, Any]) -> bool:
    """Does this source's (stored) options ask for stale detection?"""
    return bool(options.get("occurred_at_path") or options.get("version_path"))


def position_of(options: dict[str, Any], doc: Any) -> Position | None:
    """``position`` with a source's stored options."""
    return position(doc, options.get("occurred_at_path"), options.get("version_path"))


def position(
    doc: Any, occurred_at_path: str | None = None, version_path: str | None = None
) -> Position | None:
    """The event's position from its parsed body, or None. Raises BadRequest for a value
    that is there but is not a time (or a version)."""
    if path := occurred_at_path:
        raw = jsonpath.get(doc, path)
        if raw is None:
            return None
        try:
            return Position(occurred_at=parse_time(raw))
        except (TypeError, ValueError, OverflowError, OSError):
            raise BadRequest(f"{path} must be an ISO 8601 time or epoch seconds") from None
    if path := version_path:
        raw = jsonpath.get(doc, path)
        if raw is None:
            return None
        try:
            return Position(version=parse_version(raw))
        except ValueError:
            raise BadRequest(f"{path} must be a number (the event's version)") from None
    return None


def lane_position(position: Position | None) -> Decimal:
    """Where an event stands in an ordered lane before its receipt (``events.lane_position``):
    the provider's time (epoch seconds, to the microsecond) or version; 0 without one, so a
    lane without positions is in receipt order."""
    if position is None:
        return Decimal(0)
    if position.occurred_at is not None:
        return Decimal(str(position.occurred_at.timestamp()))
    return position.version if position.version is not None else Decimal(0)


def lock_key(tenant_id: int, business_key_digest: bytes) -> int:
    """A signed 64-bit key for a database advisory lock on one business key."""
    digest = hashlib.sha256(b"stale|%d|" % tenant_id + business_key_digest).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
