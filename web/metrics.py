"""``GET /metrics``: the process (or every process on the host) plus the inbox's depth.

With ``INBOX_METRICS_TOKEN`` set, a scrape must send ``Authorization: Bearer <token>``
(Prometheus: ``authorization: {credentials: ...}``); anything else is a 401. With
``INBOX_METRICS_TENANT_LABELS=false`` every ``tenant`` label is empty, here and in the
counters of every process.

With ``PROMETHEUS_MULTIPROC_DIR`` set, the counters of every web and Celery process
writing to that directory are added up; otherwise this process's default registry is
served. Depth and ages come from the database at scrape time (``inbox.store.reads.stats``).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterable

from flask import Blueprint, Response, request
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine

from inbox.domain import tokens
from inbox.domain.errors import Unauthorized
from inbox.domain.states import DeliveryState, EventState
from inbox.infra import config
from inbox.infra.metrics import tenant_label
from inbox.store.reads import invariants, stats
from web import throttle
from web.errors import error_response
from web.services import services

log = logging.getLogger(__name__)
metrics_bp = Blueprint("metrics", __name__)


class StatsCollector(Collector):
    """Inbox depth, oldest pending age, dead letters and delivery backlog, read per scrape."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _families(self) -> dict[str, GaugeMetricFamily]:
        return {
            "depth": GaugeMetricFamily(
                "inbox_depth",
                "Events waiting (received) or running (processing) per source.",
                labels=["tenant", "source", "state"],
            ),
            "oldest": GaugeMetricFamily(
                "inbox_oldest_pending_age_seconds",
                "Seconds since the oldest received or processing event was received.",
                labels=["tenant", "source"],
            ),
            "dead": GaugeMetricFamily(
                "inbox_dead_letters",
                "Events in quarantine (dead letters) now.",
                labels=["tenant", "source"],
            ),
            "backlog": GaugeMetricFamily(
                "inbox_delivery_backlog",
                "Outbound deliveries pending, sending or failed per tenant.",
                labels=["tenant", "state"],
            ),
            "backlog_age": GaugeMetricFamily(
                "inbox_oldest_pending_delivery_age_seconds",
                "Seconds since the oldest pending delivery was created.",
                labels=["tenant"],
            ),
            "up": GaugeMetricFamily(
                "inbox_stats_up", "1 when the scrape-time database query succeeded."
            ),
        }

    def describe(self) -> Iterable[Metric]:
        # Families without samples: registering this never touches the database.
        return list(self._families().values())

    def collect(self) -> Iterable[Metric]:
        fam = self._families()
        try:
            with self.engine.connect() as conn:
                depth = stats.inbox_depth(conn)
                backlog = stats.delivery_backlog(conn)
        except Exception as exc:  # a scrape must still answer; inbox_stats_up says why not
            log.warning("metrics: database statistics unavailable (%s)", type(exc).__name__)
            fam["up"].add_metric([], 0)
            return [fam["up"]]
        # Tenant labels off: rows of one source name in several tenants add up (or take
        # the oldest), so no two samples of a family share a label set.
        counts: dict[tuple[str, ...], float] = {}
        oldest: dict[tuple[str, str], float] = {}
        for row in depth:
            key = (tenant_label(row.tenant), row.source)
            if row.state == EventState.QUARANTINED:
                counts[("dead", *key)] = counts.get(("dead", *key), 0) + row.count
                continue
            counts[("depth", *key, row.state)] = (
                counts.get(("depth", *key, row.state), 0) + row.count
            )
            oldest[key] = max(oldest.get(key, 0.0), row.oldest_age_seconds)
        ages: dict[str, float] = {}
        for b in backlog:
            tenant = tenant_label(b.tenant)
            counts[("backlog", tenant, b.state)] = (
                counts.get(("backlog", tenant, b.state), 0) + b.count
            )
            if b.state == DeliveryState.PENDING:
                ages[tenant] = max(ages.get(tenant, 0.0), b.oldest_age_seconds)
        for (family, *labels), value in counts.items():
            fam[family].add_metric(labels, value)
        for key, age in oldest.items():
            fam["oldest"].add_metric(list(key), age)
        for tenant, age in ages.items():
            fam["backlog_age"].add_metric([tenant], age)
        fam["up"].add_metric([], 1)
        return list(fam.values())


class ViolationsCollector(Collector):
    """Open invariant violations per invariant (every invariant, zero included), read per
    scrape from the self-audit's table (inbox.services.audit)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "inbox_invariant_violations_open",
            "Violations of an invariant open now (found, not yet found gone by a full check).",
            labels=["invariant"],
        )

    def describe(self) -> Iterable[Metric]:
        return [self._family()]

    def collect(self) -> Iterable[Metric]:
        fam = self._family()
        try:
            with self.engine.connect() as conn:
                counts = invariants.open_counts(conn)
        except Exception as exc:  # inbox_stats_up already says the database did not answer
            log.warning("metrics: open violations unavailable (%s)", type(exc).__name__)
            return []
        for c in counts:
            fam.add_metric([c.invariant], c.count)
        return [fam]


class _ProcessRegistry(Collector):
    """This process's default registry, as one collector of a per-scrape registry."""

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def build_registry(engine: Engine) -> CollectorRegistry:
    registry = CollectorRegistry()
    if config.current("metrics_dir"):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_ProcessRegistry())
    registry.register(StatsCollector(engine))
    registry.register(ViolationsCollector(engine))
    return registry


def _authorized(expected: str) -> bool:
    given = tokens.bearer(request.headers.get("Authorization")) or ""
    return hmac.compare_digest(given.encode(), expected.encode())


@metrics_bp.get("/metrics")
def metrics() -> Response:
    ext = services()
    if ext.settings.metrics_token and not _authorized(ext.settings.metrics_token):
        throttle.check("metrics")
        throttle.failed("metrics")
        resp = error_response(Unauthorized("This scrape needs the metrics bearer token."))
        resp.headers["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return resp
    engine: Engine = ext.engine
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return Response(encoder(build_registry(engine)), content_type=content_type)
