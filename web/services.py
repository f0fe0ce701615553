"""What the views share, typed: one object per app, at ``app.extensions["inbox"]``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from flask import current_app
from sqlalchemy import Engine

from inbox.infra.config import Settings
from inbox.infra.ratelimit import RateLimiter
from inbox.services.intake import ClaimQueue, Intake
from inbox.services.overload import Backlog
from inbox.services.routes import RouteCache


@dataclass
class Services:
    settings: Settings
    engine: Engine
    doorbell: Callable[[], None]
    routes: RouteCache
    claims: ClaimQueue
    limiter: RateLimiter
    backlog: Backlog
    # Optional rings (no broker configured: None, and the sweeper does the work).
    start_bulk_replay: Callable[[int], None] | None = None
    ring_couriers: Callable[[set[int]], None] | None = None

    @cached_property
    def intake(self) -> Intake:
        """The receive use case, over these settings, engine, claims and doorbell."""
        return Intake(self.settings, self.engine, self.claims, self.doorbell)


def services() -> Services:
    """The current app's services."""
    value: Services = current_app.extensions["inbox"]
    return value
