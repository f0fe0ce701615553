"""The providers' own APIs, asked what they sent: Stripe's events list and a GitHub
hook's deliveries (and their redelivery). Plain HTTP as each provider documents it, on
httpcore (no proxy read from the environment).

The base URL is the operator's (a source option; the providers' public APIs by default),
so no SSRF guard stands in front of it. Credentials go in the Authorization header only
and are never part of an error or log line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import httpcore

from inbox.domain.errors import InboxError

STRIPE_API = "https://api.stripe.com"
GITHUB_API = "https://api.github.com"
TIMEOUT_S = 30.0
_PAGE = 100
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="next"')


class ProviderError(InboxError):
    """The provider's API could not be read (the message names the status, never the key)."""


def _call(pool: httpcore.ConnectionPool, method: str, url: str, token: str) -> tuple[int, Any, str]:
    headers: list[tuple[bytes | str, bytes | str]] = [
        ("Authorization", f"Bearer {token}"),
        ("Accept", "application/vnd.github+json" if "/hooks/" in url else "application/json"),
        ("User-Agent", "webhook-inbox-reconcile"),
        ("X-GitHub-Api-Version", "2022-11-28"),
    ]
    timeouts = {"connect": TIMEOUT_S, "read": TIMEOUT_S, "write": TIMEOUT_S, "pool": TIMEOUT_S}
    try:
        resp = pool.request(method, url, headers=headers, extensions={"timeout": timeouts})
    except httpcore.TimeoutException:
        raise ProviderError(f"{method} {_path(url)}: timed out") from None
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
        raise ProviderError(f"{method} {_path(url)}: {type(exc).__name__}") from None
    link = ""
    for name, value in resp.headers:
        if name.lower() == b"link":
            link = value.decode("latin-1")
    if resp.status >= 300:
        raise ProviderError(f"{method} {_path(url)}: HTTP {resp.status}")
    try:
        data = json.loads(resp.content) if resp.content else None
    except ValueError:
        raise ProviderError(f"{method} {_path(url)}: not JSON") from None
    return resp.status, data, link


def _path(url: str) -> str:
    """The URL without its query (a cursor is not worth logging)."""
    return url.split("?", 1)[0]


def stripe_events(api_base: str | None, key: str, since: datetime) -> Iterator[dict[str, Any]]:
    """Every event Stripe created at or after ``since``, newest first: ``GET /v1/events``
    with ``created[gte]``, a page at a time (``starting_after`` the last id, while
    ``has_more``)."""
    base = (api_base or STRIPE_API).rstrip("/")
    query: dict[str, str | int] = {"created[gte]": int(since.timestamp()), "limit": _PAGE}
    with httpcore.ConnectionPool() as pool:
        while True:
            _, data, _ = _call(pool, "GET", f"{base}/v1/events?{urlencode(query)}", key)
            if not isinstance(data, dict) or not isinstance(data.get("data"), list):
                raise ProviderError("GET /v1/events: no data list in the answer")
            page = [e for e in data["data"] if isinstance(e, dict) and e.get("id")]
            yield from page
            if not data.get("has_more") or not page:
                return
            query["starting_after"] = str(page[-1]["id"])


def _hook_path(hook: str) -> str:
    """``owner/repo/ID`` or ``orgs/ORG/ID`` as the API's hook path."""
    first, second, hook_id = hook.split("/")
    if first == "orgs":
        return f"/orgs/{second}/hooks/{hook_id}"
    return f"/repos/{first}/{second}/hooks/{hook_id}"


def github_deliveries(
    api_base: str | None, token: str, hook: str, since: datetime
) -> list[dict[str, Any]]:
    """The hook's deliveries since ``since`` (GitHub lists them newest first, a cursor per
    page in the Link header; it keeps them for 30 days)."""
    base = (api_base or GITHUB_API).rstrip("/")
    url: str | None = f"{base}{_hook_path(hook)}/deliveries?per_page={_PAGE}"
    out: list[dict[str, Any]] = []
    with httpcore.ConnectionPool() as pool:
        while url:
            _, data, link = _call(pool, "GET", url, token)
            if not isinstance(data, list):
                raise ProviderError("GET deliveries: not a list")
            for d in data:
                if not isinstance(d, dict) or not d.get("guid"):
                    continue
                at = _when(d.get("delivered_at"))
                if at is not None and at < since:
                    return out  # newest first: the rest are older still
                out.append(d)
            found = _NEXT.search(link)
            url = found.group(1) if found and data else None
    return out


def github_redeliver(api_base: str | None, token: str, hook: str, delivery_id: int) -> None:
    """``POST …/deliveries/{id}/attempts``: GitHub sends the delivery again, signed, with
    its original ``X-GitHub-Delivery``."""
    base = (api_base or GITHUB_API).rstrip("/")
    with httpcore.ConnectionPool() as pool:
        _call(pool, "POST", f"{base}{_hook_path(hook)}/deliveries/{delivery_id}/attempts", token)


def _when(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
