"""The admin API under ``/api/v1``: bearer tokens, events, deliveries, bulk replays.

Every route but ``/api/v1/openapi.json`` needs ``Authorization: Bearer <token>``
(``inbox tokens create``). A viewer reads; anything but GET needs an operator. A
token limited to one tenant sees only that tenant: anything else is a 404.
"""

from __future__ import annotations

# The route modules register themselves on ``api``.
from web.api import (
    auth,
    bulk,
    deliveries,
    endpoints,
    erasures,
    events,
    holds,
    lanes,
    openapi,
    tenants,
)
from web.api.blueprint import api

__all__ = [
    "api",
    "auth",
    "bulk",
    "deliveries",
    "endpoints",
    "erasures",
    "events",
    "holds",
    "lanes",
    "openapi",
    "tenants",
]
