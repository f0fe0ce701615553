"""Failed sign-ins and bearer tokens, throttled per client address (429 + Retry-After).

``INBOX_AUTH_MAX_FAILURES`` failures (default 10) within ``INBOX_AUTH_WINDOW_SECONDS``
(default 300) from one address, and every attempt from it is refused until the window
ends, good credentials included: otherwise a guesser learns when it has guessed right.
The count lives in the database (``inbox/store/write/throttle.py`` says why; kept through
``inbox.services.admin``), so it holds across web processes and hosts. The address is
the TCP peer's; behind a reverse proxy set ``INBOX_TRUSTED_PROXIES`` to the number of
proxies that append to X-Forwarded-For.
"""

from __future__ import annotations

import logging

from flask import request

from inbox.domain.errors import TooManyRequests
from inbox.services import admin
from web import actions
from web.services import services

log = logging.getLogger(__name__)


def client_address() -> str:
    return request.remote_addr or "unknown"


def check(kind: str) -> None:
    """429 while this client is over its failures for ``kind`` (login | bearer | metrics)."""
    ext = services()
    limit, window = ext.settings.auth_max_failures, ext.settings.auth_window_seconds
    if limit <= 0:
        return
    wait = admin.blocked_for(actions.runtime(), kind, client_address(), limit, window)
    if wait:
        raise TooManyRequests("Too many failed attempts from this address.", retry_after=wait)


def failed(kind: str) -> None:
    """Count one failure for this client."""
    ext = services()
    if ext.settings.auth_max_failures <= 0:
        return
    n = admin.record_failure(
        actions.runtime(), kind, client_address(), ext.settings.auth_window_seconds
    )
    if n == ext.settings.auth_max_failures:
        log.warning("%s failures from %s reached the limit (%d)", kind, client_address(), n)
