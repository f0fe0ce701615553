"""``/healthz`` (the process is up) and ``/readyz`` (ready for traffic: the database
answers and takes writes, its schema is the code's, the stored signing secrets can be
read, and the broker answers).

``/readyz`` answers 503 with ``cause`` naming the first failing check (database, schema,
secrets: INBOX_KEK missing or not the key of the stored secrets, keystore: the payloads' key
store unset while payload keys exist, or not answering, broker) and ``checks``
saying what each found, so a load balancer stops sending events to a receiver that would
answer every one of them 503, and an operator sees why. ``playbooks`` names sources whose
playbook is not registered; it is advisory: their events are accepted and held. A
database that answers but refuses writes (a standby, a primary demoted during a
failover, ``default_transaction_read_only``, or no host of a multi-host URL taking writes)
is not ready: ``checks.database`` says ``read-only: …``; one that does not answer says
``unreachable: <error class>``.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from flask import Blueprint

from inbox.infra.config import Settings
from inbox.services import readiness
from web.services import services

health = Blueprint("health", __name__)
BROKER_TIMEOUT_SECONDS = 1.0
NOT_CONFIGURED = "not configured"
NOT_CHECKED = readiness.NOT_CHECKED  # also a broker this probe does not speak (sqs://)
# Named in ``checks`` but not a reason for 503: events of a source whose playbook is
# missing are accepted and held (nothing is lost), where a 503 would have the provider
# retry, then give up on the endpoint.
ADVISORY = frozenset({"playbooks"})


@health.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@health.get("/readyz")
def readyz() -> tuple[dict[str, object], int]:
    ext = services()
    checks = readiness.store_checks(ext.engine)
    checks["broker"] = check_broker(ext.settings)
    failed = [
        k
        for k, v in checks.items()
        if v not in ("ok", NOT_CONFIGURED, NOT_CHECKED)
        and k not in ADVISORY
        and not (k == "schema" and v.startswith(readiness.AHEAD))
    ]
    if not failed:
        return {"status": "ok", "checks": checks}, 200
    return {"status": "unavailable", "cause": failed[0], "checks": checks}, 503


def check_broker(settings: Settings) -> str:
    """ "ok", "not configured" (no broker: the sweeper alone finds new events), "not
    checked", or the class name of the error. Redis gets a PING; AMQP a TCP connect."""
    url = settings.broker_url or settings.redis_url
    if not url:
        return NOT_CONFIGURED
    scheme = urlsplit(url).scheme.lower()
    try:
        if scheme.startswith(("redis", "sentinel")) or scheme == "unix":
            _ping_redis(url)
        elif scheme.startswith(("amqp", "pyamqp")):
            _connect(url, 5671 if scheme.endswith("s") else 5672)
        else:
            return NOT_CHECKED
    except Exception as exc:
        return exc.__class__.__name__
    return "ok"


def _ping_redis(url: str) -> None:
    from inbox.infra import redis_client

    if url.startswith("redis+socket://"):  # kombu's spelling of a Unix socket
        url = "unix://" + url[len("redis+socket://") :]
    client = redis_client.client(
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
