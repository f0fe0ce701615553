"""The operator console under ``/ui``: server-rendered pages over the admin API's store.

Sign in with an API token (``inbox tokens create``); the session is held on the server
and the cookie carries only its random id (``web/ui/security.py``). Every POST form
carries a per-session CSRF token.
A viewer reads; an operator also replays. A tenant-scoped token sees only its tenant:
anything else is a 404, exactly as in the API.
"""

from __future__ import annotations

# The view modules register themselves on ``ui``.
from web.ui import (
    dashboard,
    deadletters,
    deliveries,
    display,
    endpoints,
    erasures,
    errors,
    events,
    holds,
    invariants,
    replays,
    session,
    sources,
)
from web.ui.blueprint import ui

__all__ = [
    "dashboard",
    "deadletters",
    "deliveries",
    "display",
    "endpoints",
    "erasures",
    "errors",
    "events",
    "holds",
    "invariants",
    "replays",
    "session",
    "sources",
    "ui",
]
