"""``/healthz`` (the process is up) and ``/readyz`` (the database and the broker answer)."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from flask import Blueprint
from sqlalchemy import text

from inbox.infra.config import Settings
from web.services import services

health = Blueprint("health", __name__)
BROKER_TIMEOUT_SECONDS = 1.0
NOT_CONFIGURED = "not configured"
NOT_CHECKED = "not checked"  # a broker this probe does not speak (e.g. sqs://)


@health.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@health.get("/readyz")
def readyz() -> tuple[dict[str, object], int]:
    ext = services()
    checks: dict[str, str] = {}
    try:
        with ext.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = exc.__class__.__name__
    checks["broker"] = check_broker(ext.settings)
    ok = all(v in ("ok", NOT_CONFIGURED, NOT_CHECKED) for v in checks.values())
    return {"status": "ok" if ok else "unavailable", "checks": checks}, 200 if ok else 503


def check_broker(settings: Settings) -> str:
    """ "ok", "not configured" (no broker: the sweeper alone finds new events), "not
    checked", or the class name of the error. Redis gets a PING; AMQP a TCP connect."""
    url = settings.broker_url or settings.redis_url
    if not url:
        return NOT_CONFIGURED
    scheme = urlsplit(url).scheme.lower()
    try:
        if scheme.startswith("redis") or scheme == "unix":
            _ping_redis(url)
        elif scheme.startswith(("amqp", "pyamqp")):
            _connect(url, 5671 if scheme.endswith("s") else 5672)
        else:
            return NOT_CHECKED
    except Exception as exc:
        return exc.__class__.__name__
    return "ok"


def _ping_redis(url: str) -> None:
    import redis

    if url.startswith("redis+socket://"):  # kombu's spelling of a Unix socket
        url = "unix://" + url[len("redis+socket://") :]
    client = redis.Redis.from_url(
        url,
        socket_timeout=BROKER_TIMEOUT_SECONDS,
        socket_connect_timeout=BROKER_TIMEOUT_SECONDS,
    )
    try:
        client.ping()
    finally:
        client.close()


def _connect(url: str, default_port: int) -> None:
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    with socket.create_connection((host, parts.port or default_port), BROKER_TIMEOUT_SECONDS):
        pass
