"""The Flask app factory: thin views over ``inbox``."""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask
from sqlalchemy import Engine

from inbox.config import Settings
from inbox.logs import configure_logging
from inbox.store.claims import Claims
from inbox.store.engine import make_engine
from web.api import api
from web.errors import register_error_handlers
from web.health import health
from web.ingest import hooks
from web.metrics import metrics_bp
from web.routes import RouteCache
from web.ui import ui


def create_app(
    settings: Settings | None = None,
    engine: Engine | None = None,
    doorbell: Callable[[], None] | None = None,
    route_cache_seconds: float = 5.0,
) -> Flask:
    settings = settings or Settings.from_env()
    configure_logging(settings.log_level)
    app = Flask(__name__)
    engine = engine or make_engine(settings)
    hooks_: dict[str, object] = {}
    if doorbell is None:
        from web.doorbell import broker_hooks, default_doorbell

        doorbell = default_doorbell(settings)
        hooks_ = broker_hooks(settings)
    app.extensions["inbox"] = {
        "settings": settings,
        "engine": engine,
        "doorbell": doorbell,
        "routes": RouteCache(engine, route_cache_seconds),
        "claims": Claims(engine),
        **hooks_,
    }
    register_error_handlers(app)
    app.register_blueprint(hooks)
    app.register_blueprint(health)
    app.register_blueprint(metrics_bp)
    app.register_blueprint(api)
    app.register_blueprint(ui)
    return app
