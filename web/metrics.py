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
from inbox.domain.endpoint_health import EndpointState
from inbox.domain.errors import Unauthorized
from inbox.domain.states import DeliveryState, EventState
from inbox.infra import config
from inbox.infra.metrics import tenant_label
from inbox.services import stats
from web import throttle
from web.errors import error_response
from web.services import services

log = logging.getLogger(__name__)
metrics_bp = Blueprint("metrics", __name__)


class StatsCollector(Collector):
    """Inbox depth, oldest pending age, dead letters, blocked lanes and delivery backlog,
    read per scrape."""

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
            "ep_state": GaugeMetricFamily(
                "inbox_endpoint_state",
                "1 for each endpoint's state (inbox.domain.endpoint_health: healthy, degraded,"
                " open_circuit, paused, disabled), 0 for the others.",
                labels=["tenant", "endpoint", "state"],
            ),
            "ep_held": GaugeMetricFamily(
                "inbox_endpoint_held_deliveries",
                "Deliveries held for a paused or disabled endpoint.",
                labels=["tenant", "endpoint"],
            ),
            "ep_held_age": GaugeMetricFamily(
                "inbox_endpoint_held_oldest_age_seconds",
                "Seconds since the oldest held delivery of the endpoint was made (0: none).",
                labels=["tenant", "endpoint"],
            ),
            "ep_failure_rate": GaugeMetricFamily(
                "inbox_endpoint_failure_rate",
                "Share of the endpoint's attempts in the last 15 minutes that got no 2xx.",
                labels=["tenant", "endpoint"],
            ),
            "lanes": GaugeMetricFamily(
                "inbox_lanes_blocked",
                "Ordered lanes held by a quarantined event (until it is replayed or skipped).",
                labels=["tenant", "source"],
            ),
            "lane_held": GaugeMetricFamily(
                "inbox_lane_held_events",
                "Events waiting behind a quarantined event of their ordered lane.",
                labels=["tenant", "source"],
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
            found = stats.snapshot(self.engine)
        except Exception as exc:  # a scrape must still answer; inbox_stats_up says why not
            log.warning("metrics: database statistics unavailable (%s)", type(exc).__name__)
            fam["up"].add_metric([], 0)
            return [fam["up"]]
        depth, backlog, endpoints, blocked = (
            found.depth,
            found.backlog,
            found.endpoints,
            found.blocked,
        )
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
        for lane in blocked:
            key = (tenant_label(lane.tenant), lane.source)
            counts[("lanes", *key)] = counts.get(("lanes", *key), 0) + lane.lanes
            counts[("lane_held", *key)] = counts.get(("lane_held", *key), 0) + lane.held
        for (family, *labels), value in counts.items():
            fam[family].add_metric(labels, value)
        for key, age in oldest.items():
            fam["oldest"].add_metric(list(key), age)
        for tenant, age in ages.items():
            fam["backlog_age"].add_metric([tenant], age)
        for ep in endpoints:
            labels = [tenant_label(ep.tenant), ep.public_id]
            for state in EndpointState:
                fam["ep_state"].add_metric([*labels, state.value], float(ep.state == state))
            fam["ep_held"].add_metric(labels, ep.held)
            fam["ep_held_age"].add_metric(labels, ep.held_age_seconds)
            fam["ep_failure_rate"].add_metric(labels, ep.recent.failure_rate)
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
            counts = stats.open_violations(self.engine)
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
    if config.settings().metrics_dir:
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
