"""Helpers the admin API's views share: query parsing, cursors, JSON-ready values."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from flask import request

from inbox.domain.errors import BadRequest, InboxError, NotFound
from inbox.services.bulk import parse_time
from inbox.store.reads.deliveries import DeliverySummary
from inbox.store.reads.events import EventSummary
from inbox.store.reads.listing import Filter

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def jsonable(value: Any) -> Any:
    """Times as ISO 8601, bytes as hex, all the way down."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, Decimal):
        return float(value)
    return value


def not_found(what: str) -> InboxError:
    return NotFound(f"No such {what}.")


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"v1:{last_id}".encode()).decode().rstrip("=")


def cursor() -> int | None:
    """The ``cursor`` query argument: the last id of the previous page."""
    return decode_cursor(request.args.get("cursor"))


def decode_cursor(cursor: str | None) -> int | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        version, _, value = raw.partition(":")
        if version != "v1":
            raise ValueError(version)
        last_id = int(value)
        if not 0 <= last_id < 2**63:  # ids are bigint: past it, PostgreSQL refuses the value
            raise ValueError(value)
        return last_id
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadRequest("cursor is not one this API gave out") from None


def limit() -> int:
    raw = request.args.get("limit", str(DEFAULT_LIMIT))
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest("limit must be a whole number") from None
    if not 1 <= value <= MAX_LIMIT:
        raise BadRequest(f"limit must be from 1 to {MAX_LIMIT}")
    return value


def list_filter(states: tuple[str, ...]) -> Filter:
    """The listing filter from the query string."""
    args = request.args
    state = args.get("state") or None
    if state is not None and state not in states:
        raise BadRequest(f"state must be one of {', '.join(states)}")
    since, until = args.get("since"), args.get("until")
    return Filter(
        tenant=args.get("tenant") or None,
        source=args.get("source") or None,
        endpoint=args.get("endpoint") or None,
        state=state,
        event_type=args.get("type") or None,
        since=parse_time(since, "since") if since else None,
        until=parse_time(until, "until") if until else None,
        error_class=args.get("error") or None,
        untyped=args.get("untyped") == "true",
    )


def page(rows: Sequence[EventSummary | DeliverySummary], size: int) -> dict[str, Any]:
    """One page of a listing fetched with ``size + 1`` rows: the extra row means more."""
    more = len(rows) > size
    rows = rows[:size]
    cursor = encode_cursor(rows[-1].id) if more and rows else None
    items = [r.public() for r in rows]
    return {"items": jsonable(items), "next_cursor": cursor}
