"""What a process builds once, at its start: its engine and the bells of its broker.

The CLI and the workers call these factories when they start (the web app has its own,
``web.app.create_app``), so nothing above the services constructs an engine or knows
the store's connection machinery. ``Runtime`` is what an operator's use case needs from
its process (``inbox.services.operations``): the settings, the engine, and the best-effort
rings that tell workers and couriers about a change at once (without a broker, or when it
does not answer, the sweeper finds the work on its next round).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from inbox.domain.errors import InboxError
from inbox.infra import broker
from inbox.infra.config import Settings
from inbox.store.db.engine import make_engine, sqlalchemy_url
from inbox.store.schema import migrate as migrations

log = logging.getLogger(__name__)

Rung = Literal["rung", "failed", "no bell"]


@dataclass(frozen=True)
class Bells:
    """Best-effort rings after a commit; a bell that is None is not configured."""

    doorbell: Callable[[], None] | None = None
    ring_couriers: Callable[[set[int]], None] | None = None
    start_bulk_replay: Callable[[int], None] | None = None

    def ring(self, name: str, *args: object) -> Rung:
        """Ring one bell; a failure is logged, never raised (the sweeper re-rings)."""
        bell = getattr(self, name)
        if bell is None:
            return "no bell"
        try:
            bell(*args)
        except Exception as exc:
            log.warning(
                "%s failed: %s",
                name,
                exc.__class__.__name__,
                extra={"error_class": type(exc).__name__},
            )
            return "failed"
        return "rung"


@dataclass(frozen=True)
class Runtime:
    """A process's settings, engine and bells: what an operator's use case runs with."""

    settings: Settings
    engine: Engine
    bells: Bells = field(default_factory=Bells)


def engine(settings: Settings, pool_size: int | None = None) -> Engine:
    """The process's engine (its connections open on first use)."""
    return make_engine(settings, pool_size=pool_size)


def bells(settings: Settings) -> Bells:
    """The broker's bells for a short-lived process (the CLI): rung in line, as it may
    exit right after; none without a broker. No bulk replay runner is rung: the CLI runs
    the jobs it approves itself, and the sweep starts any other queued job."""
    return Bells(
        doorbell=broker.default_doorbell(settings),
        ring_couriers=broker.rings(settings).ring_couriers,
    )


def start(settings: Settings, pool_size: int | None = None) -> Runtime:
    """A CLI's runtime: an engine of ``pool_size`` connections and the broker's bells."""
    return Runtime(settings, engine(settings, pool_size), bells(settings))


def database_label(url: str) -> str:
    """DATABASE_URL without its password, to name in an error."""
    try:
        return make_url(sqlalchemy_url(url)).render_as_string(hide_password=True)
    except Exception:  # a URL that does not parse is named by its setting
        return "DATABASE_URL"


def migrate(database_url: str) -> str | None:
    """Apply every migration the code carries; the revision the database is then at.

    A database that a newer release migrated is refused with what to do, not treated
    as an error of this one."""
    newer = migrations.newer_than_code(database_url)
    if newer is not None:
        raise InboxError(
            f"the database is at {newer}, newer than this release's newest revision"
            f" ({migrations.head_revision()}): run inbox migrate of the release that wrote"
            " it; nothing was changed"
        )
    migrations.upgrade(database_url)
    return migrations.head_revision()


def head_revision() -> str | None:
    """The newest migration the code carries."""
    return migrations.head_revision()
