"""An ordered source's lane key: by default its business key; or taken from the body and
the headers by JSON paths (``lane_key_paths``), or computed by a CEL expression over them
(``lane_key``, compiled and evaluated as the source's ``filter`` is: inbox.domain.filters).

A path that starts with ``headers.`` reads the request header of that name (any case);
any other path reads the parsed body. The key is the values found, in order; an event
with none of them (or whose expression fails, or gives no text or number) has no lane and
runs unordered, as an event without a business key does.

Pure: imports no framework or driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inbox.domain import filters, jsonpath
from inbox.domain.idempotency import business_key_digest
from inbox.domain.textcheck import check_text

HEADER_PREFIX = "headers."
MAX_KEY_CHARS = 1000


def configured(lane_key: str | None, lane_key_paths: tuple[str, ...]) -> bool:
    return bool(lane_key or lane_key_paths)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    lowered = name.lower()
    for k, v in headers.items():
        if k.lower() == lowered:
            return v
    return None


def values_of(
    lane_key: str | None, lane_key_paths: tuple[str, ...], body: Any, headers: Mapping[str, str]
) -> list[str] | None:
    """The lane key's values, or None when the event has no lane."""
    if lane_key:
        lowered = {k.lower(): v for k, v in headers.items()}
        try:
            result = filters.program(lane_key).execute({"body": body, "headers": lowered})
        except Exception:  # a missing field, a type error: no lane
            return None
        if isinstance(result, bool) or not isinstance(result, str | int | float):
            return None
        text = str(result)
        return [text] if text else None
    found = [
        _header(headers, p[len(HEADER_PREFIX) :])
        if p.startswith(HEADER_PREFIX)
        else jsonpath.get_text(body, p)
        for p in lane_key_paths
    ]
    if not any(v is not None for v in found):
        return None
    return [v or "" for v in found]


def digest(
    tenant_id: int,
    lane_key: str | None,
    lane_key_paths: tuple[str, ...],
    body: Any,
    headers: Mapping[str, str],
) -> bytes | None:
    """The stored lane (``events.ordering_key``) for an event of an ordered source whose
    lane key is configured; None: no lane."""
    values = values_of(lane_key, lane_key_paths, body, headers)
    if values is None:
        return None
    for value in values:
        check_text(value[:MAX_KEY_CHARS], "A lane key value")
    return business_key_digest(tenant_id, ["lane", *values])
