"""The Flask app factory: thin views over ``inbox``."""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask, redirect
from sqlalchemy import Engine

from inbox.infra import broker, config, tracing
from inbox.infra.config import Settings
from inbox.infra.logs import configure_logging
from inbox.infra.ratelimit import RateLimiter
from inbox.services import intake, playbooks, runtime
from inbox.services.overload import Backlog
from inbox.services.routes import RouteCache
from web.api import api
from web.errors import register_error_handlers
from web.health import health
from web.ingest import hooks
from web.metrics import metrics_bp
from web.receiver import Receiver
from web.services import Services
from web.ui import ui
from web.validate import register as register_edge_checks


def create_app(
    settings: Settings | None = None,
    engine: Engine | None = None,
    doorbell: Callable[[], None] | None = None,
    route_cache_seconds: float = 5.0,
) -> Flask:
    settings = settings or config.settings()
    configure_logging(settings.log_level)
    tracing.configure(settings, "web")  # off (nothing installed) unless OTEL_TRACES_EXPORTER
    # For /readyz, which names a source whose playbook no module registers.
    playbooks.load(settings.playbook_modules)
    app = Flask(__name__)
    engine = engine or runtime.engine(settings)
    rings = broker.Rings()
    if doorbell is None:
        doorbell = broker.default_doorbell(settings, background=True)
        rings = broker.rings(settings)
    app.extensions["inbox"] = Services(
        settings=settings,
        engine=engine,
        doorbell=doorbell,
        routes=RouteCache(engine, route_cache_seconds),
        claims=intake.claim_queue(engine, settings),
        limiter=RateLimiter(settings.redis_url),
        backlog=Backlog(engine, settings.max_backlog),
        start_bulk_replay=rings.start_bulk_replay,
        ring_couriers=rings.ring_couriers,
    )
    if settings.trusted_proxies > 0:  # the client's address, as the proxies saw it
        from werkzeug.middleware.proxy_fix import ProxyFix

        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=settings.trusted_proxies)  # type: ignore[method-assign]
    register_error_handlers(app)
    register_edge_checks(app)
    app.register_blueprint(hooks)
    app.register_blueprint(health)
    app.register_blueprint(metrics_bp)
    app.register_blueprint(api)
    app.register_blueprint(ui)
    # A person who opens the server's address finds the console.
    app.add_url_rule("/", "root", lambda: redirect("/ui", code=302))
    tracing.instrument_flask(app)  # server spans, continuing the sender's traceparent
    if not tracing.enabled():  # the accepted path served beside Flask (web/receiver.py)
        app.wsgi_app = Receiver(app)  # type: ignore[method-assign]
    return app
