"""The operator use cases as the admin API and the console call them.

The use cases are ``inbox.services.operations`` and ``inbox.services.replays`` (the CLI
calls the same functions); here the request's token becomes the ``Actor`` and the app's
services the ``Runtime`` they run with.
"""

from __future__ import annotations

from typing import Protocol

from inbox.domain.records import TenantId
from inbox.services.operations import Actor
from inbox.services.runtime import Bells, Runtime
from web.services import services


class _Caller(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def tenant_id(self) -> TenantId | None: ...


def actor(token: _Caller) -> Actor:
    """The token's name (audited) and the tenant it is limited to."""
    return Actor(token.name, token.tenant_id)


def runtime() -> Runtime:
    """The app's settings, engine and bells (None where no broker is configured)."""
    ext = services()
    bells = Bells(ext.doorbell, ext.ring_couriers, ext.start_bulk_replay)
    return Runtime(ext.settings, ext.engine, bells)
