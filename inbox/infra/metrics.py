"""Prometheus metrics, and the small functions the rest of the code calls to record them.

Every ``record_*`` function is cheap and never raises: a metrics failure must not fail
an ingest, a playbook or a delivery. With ``PROMETHEUS_MULTIPROC_DIR`` set before
``prometheus_client`` is first imported, values are written to per-process files in that
directory and ``/metrics`` (web/metrics.py) adds up every web and Celery process on
the host. Gauges say how to combine processes (``multiprocess_mode``).

Inbox depth and the age of the oldest pending event are not here: they are read from the
database at scrape time (``inbox.store.reads.stats`` and the collector in ``web/metrics.py``).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from inbox.domain.outcomes import DeliveryOutcome, IngestOutcome
from inbox.domain.states import FINISHED, EventState
from inbox.infra import config

log = logging.getLogger(__name__)

if _dir := config.settings().metrics_dir:
    # prometheus_client opens its per-process files here on first use.
    os.makedirs(_dir, exist_ok=True)

# Received → completed (or quarantined): 5 ms to 5 min, roughly 2.5x apart.
LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)

_TS = ("tenant", "source")
# INBOX_METRICS_TENANT_LABELS=false: every tenant label is empty, so the exposition names
# no customer (and has fewer series). None until first read from the environment.
_tenant_labels: bool | None = None


def set_tenant_labels(on: bool | None) -> None:
    """Turn tenant label values on or off (None: read INBOX_METRICS_TENANT_LABELS again)."""
    global _tenant_labels
    _tenant_labels = on


def tenant_labels() -> bool:
    global _tenant_labels
    if _tenant_labels is None:
        _tenant_labels = config.settings().metrics_tenant_labels
    return _tenant_labels


def tenant_label(tenant: object) -> str:
    """The value of a ``tenant`` label: the name, or empty when tenant labels are off."""
    return str(tenant) if tenant_labels() else ""


ACCEPTED = Counter("inbox_events_accepted", "Events stored (first delivery of a key).", _TS)
DUPLICATES = Counter(
    "inbox_duplicate_deliveries",
    "Deliveries answered with the stored response of an earlier delivery (replays).",
    _TS,
)
CONFLICTS = Counter(
    "inbox_idempotency_conflicts",
    "Deliveries that reused an idempotency key with a different body (answered 422).",
    _TS,
)
IN_FLIGHT = Counter(
    "inbox_in_flight_retries",
    "Deliveries answered 409 because the original was still being processed.",
    _TS,
)
LATENCY = Histogram(
    "inbox_event_processing_seconds",
    "Time from receipt to the final state (completed or quarantined).",
    (*_TS, "state"),
    buckets=LATENCY_BUCKETS,
)
RETRIES = Counter(
    "inbox_event_retries", "Failed attempts that were scheduled for another try.", _TS
)
DEAD_LETTERED = Counter(
    "inbox_dead_lettered", "Events moved to quarantine (the dead-letter state).", _TS
)
HELD = Counter(
    "inbox_events_held",
    "Events held because their source's playbook is not registered (not a failure).",
    _TS,
)
FILTERED = Counter(
    "inbox_events_filtered",
    "Events stored as filtered (their source's filter was not true): answered, never run.",
    _TS,
)
CALLBACKS_FILTERED = Counter(
    "inbox_callbacks_filtered",
    "Callbacks not written for an endpoint because its filter was not true.",
    ("tenant",),
)
RELEASED = Counter(
    "inbox_events_released", "Held events released once their playbook was registered."
)
RECONCILE_MISMATCHES = Counter(
    "inbox_reconcile_mismatches",
    "Events the provider knows and we do not (missing), or the reverse (extra).",
    (*_TS, "kind"),
)
RECONCILE_LAST_RUN = Gauge(
    "inbox_reconcile_last_run_timestamp_seconds",
    "Unix time of the last reconciliation run.",
    _TS,
    multiprocess_mode="max",
)
RECONCILE_GAPS_FILLED = Counter(
    "inbox_reconcile_gaps_filled",
    "Events the provider sent and the inbox lacked: imported from its API, or redelivered.",
    (*_TS, "action"),
)
DELIVERY_ATTEMPTS = Counter(
    "inbox_delivery_attempts",
    "Outbound callback attempts by outcome.",
    ("tenant", "outcome"),
)
CIRCUIT_TRANSITIONS = Counter(
    "inbox_endpoint_circuit_transitions",
    "Endpoints' circuit breakers opening and closing (to: open | closed).",
    ("tenant", "to"),
)
SWEEP_REQUEUED = Counter(
    "inbox_sweep_requeued", "Events whose lease expired and were put back by the sweeper."
)
SWEEP_QUARANTINED = Counter(
    "inbox_sweep_quarantined",
    "Events whose lease expired with no attempts left, quarantined by the sweeper.",
)
SWEEP_LAST_RUN = Gauge(
    "inbox_sweep_last_run_timestamp_seconds",
    "Unix time of the last sweeper round.",
    multiprocess_mode="max",
)
DB_OUTAGES = Counter(
    "inbox_database_outages",
    "Database outages (unreachable or read-only) met by a worker or courier process: "
    "one per outage and process, counted when its first error is seen.",
)
INVARIANT_VIOLATIONS = Counter(
    "inbox_invariant_violations",
    "Violations of an invariant the self-audit opened (inbox.domain.invariants); the open"
    " ones are inbox_invariant_violations_open.",
    ("invariant",),
)
INVARIANT_CHECK_SECONDS = Counter(
    "inbox_invariant_check_seconds",
    "Seconds the self-audit spent checking an invariant (its share of the database's time).",
    ("invariant",),
)
INVARIANT_LAST_CHECK = Gauge(
    "inbox_invariant_last_check_timestamp_seconds",
    "Unix time an invariant was last checked.",
    ("invariant",),
    multiprocess_mode="max",
)

ALL: tuple[MetricWrapperBase, ...] = (
    ACCEPTED,
    DUPLICATES,
    CONFLICTS,
    IN_FLIGHT,
    LATENCY,
    RETRIES,
    DEAD_LETTERED,
    HELD,
    FILTERED,
    CALLBACKS_FILTERED,
    RELEASED,
    RECONCILE_MISMATCHES,
    RECONCILE_LAST_RUN,
    RECONCILE_GAPS_FILLED,
    DELIVERY_ATTEMPTS,
    CIRCUIT_TRANSITIONS,
    SWEEP_REQUEUED,
    SWEEP_QUARANTINED,
    SWEEP_LAST_RUN,
    DB_OUTAGES,
    INVARIANT_VIOLATIONS,
    INVARIANT_CHECK_SECONDS,
    INVARIANT_LAST_CHECK,
)

_INGEST = {
    IngestOutcome.ACCEPTED: ACCEPTED,
    IngestOutcome.DUPLICATE: DUPLICATES,
    IngestOutcome.CONFLICT: CONFLICTS,
    IngestOutcome.IN_FLIGHT: IN_FLIGHT,
}
DELIVERY_OUTCOMES = frozenset(DeliveryOutcome)
_warned = False


def _failed(what: str, exc: Exception) -> None:
    global _warned
    if not _warned:  # once per process: a broken metrics directory must not flood the log
        _warned = True
        log.warning("metrics: %s failed (%s); further failures are not logged", what, exc)


# The receiver's counters by (outcome, tenant label, source): ``labels`` looks its child
# up under a lock with its labels checked on every call; this is one dict lookup.
_ingest_children: dict[tuple[str, str, str], Any] = {}


def _ingest_child(outcome: IngestOutcome, tenant: str, source: str) -> Any:
    key = (outcome, tenant_label(tenant), str(source))
    child = _ingest_children.get(key)
    if child is None:
        counter = _INGEST.get(outcome)
        if counter is None:
            return None
        child = _ingest_children[key] = counter.labels(key[1], key[2])
    return child


def record_ingest(tenant: str, source: str, outcome: IngestOutcome, n: int = 1) -> None:
    """``n`` answered deliveries: accepted | duplicate | conflict | in_flight."""
    try:
        child = _ingest_child(outcome, tenant, source)
        if child is not None:
            child.inc(n)
    except Exception as exc:
        _failed("record_ingest", exc)


def record_filtered(tenant: str, source: str) -> None:
    """An event stored as filtered (also counted as accepted: it is stored)."""
    try:
        FILTERED.labels(tenant_label(tenant), source).inc()
    except Exception as exc:
        _failed("record_filtered", exc)


def record_callbacks_filtered(tenant: str, n: int) -> None:
    """``n`` callbacks an endpoint's filter kept from being written."""
    try:
        CALLBACKS_FILTERED.labels(tenant_label(tenant)).inc(n)
    except Exception as exc:
        _failed("record_callbacks_filtered", exc)


def record_claims(counts: dict[tuple[IngestOutcome, str, str], int]) -> None:
    """One claiming statement's committed claims, by (outcome, tenant, source): one
    increment per label instead of one per request (an increment of a multiprocess
    counter checks the process id and takes a lock; per request it showed in profiles)."""
    for (outcome, tenant, source), n in counts.items():
        record_ingest(tenant, source, outcome, n)


def record_completed(tenant: str, source: str, latency_seconds: float, state: str) -> None:
    """What became of one run: completed or quarantined (with the time since receipt),
    received (a retry was scheduled); anything else (a lost lease) is not counted."""
    try:
        tenant, source = tenant_label(tenant), str(source)
        if state in FINISHED:
            LATENCY.labels(tenant, source, state).observe(max(0.0, float(latency_seconds)))
            if state == EventState.QUARANTINED:
                DEAD_LETTERED.labels(tenant, source).inc()
        elif state == EventState.RECEIVED:
            RETRIES.labels(tenant, source).inc()
    except Exception as exc:
        _failed("record_completed", exc)


def record_held(tenant: str, source: str) -> None:
    """An event held: its source's playbook is not registered in the process that ran it."""
    try:
        HELD.labels(tenant_label(tenant), str(source)).inc()
    except Exception as exc:
        _failed("record_held", exc)


def record_released(count: int) -> None:
    try:
        RELEASED.inc(max(0, int(count)))
    except Exception as exc:
        _failed("record_released", exc)


def record_dead_lettered(tenant: str, source: str, count: int = 1) -> None:
    """Events quarantined outside a run (e.g. by a bulk operation that knows the source)."""
    try:
        if count > 0:
            DEAD_LETTERED.labels(tenant_label(tenant), str(source)).inc(count)
    except Exception as exc:
        _failed("record_dead_lettered", exc)


def record_delivery_attempt(tenant: str, outcome: str) -> None:
    """One outbound attempt: delivered | retried | failed | blocked | lost (else "other")."""
    try:
        label = outcome if outcome in DELIVERY_OUTCOMES else "other"
        DELIVERY_ATTEMPTS.labels(tenant_label(tenant), label).inc()
    except Exception as exc:
        _failed("record_delivery_attempt", exc)


def record_circuit_transition(tenant: str, to: str) -> None:
    """An endpoint's circuit opened or closed (``inbox.domain.circuit``)."""
    try:
        CIRCUIT_TRANSITIONS.labels(tenant_label(tenant), to).inc()
    except Exception as exc:
        _failed("record_circuit_transition", exc)


def record_reconcile(tenant: str, source: str, missing: int, extra: int) -> None:
    """One reconciliation run of a source against its provider's list of events."""
    try:
        tenant, source = tenant_label(tenant), str(source)
        # Touch both series so a rate over them exists from the first run on.
        RECONCILE_MISMATCHES.labels(tenant, source, "missing").inc(max(0, int(missing)))
        RECONCILE_MISMATCHES.labels(tenant, source, "extra").inc(max(0, int(extra)))
        RECONCILE_LAST_RUN.labels(tenant, source).set(time.time())
    except Exception as exc:
        _failed("record_reconcile", exc)


def record_gaps_filled(tenant: str, source: str, imported: int, redelivered: int) -> None:
    """One gap-filling run (inbox.services.gapfill): what it imported and redelivered."""
    try:
        tenant, source = tenant_label(tenant), str(source)
        RECONCILE_GAPS_FILLED.labels(tenant, source, "imported").inc(max(0, int(imported)))
        RECONCILE_GAPS_FILLED.labels(tenant, source, "redelivered").inc(max(0, int(redelivered)))
    except Exception as exc:
        _failed("record_gaps_filled", exc)


def record_sweep(requeued: int, quarantined: int) -> None:
    """One sweeper round."""
    try:
        SWEEP_REQUEUED.inc(max(0, int(requeued)))
        SWEEP_QUARANTINED.inc(max(0, int(quarantined)))
        SWEEP_LAST_RUN.set(time.time())
    except Exception as exc:
        _failed("record_sweep", exc)


def record_database_outage() -> None:
    """A process met the start of a database outage."""
    try:
        DB_OUTAGES.inc()
    except Exception as exc:
        _failed("record_database_outage", exc)


def record_invariant_check(invariant: str, opened: int, seconds: float) -> None:
    """One check of an invariant: the violations it opened and what it cost."""
    try:
        INVARIANT_VIOLATIONS.labels(invariant).inc(max(0, int(opened)))
        INVARIANT_CHECK_SECONDS.labels(invariant).inc(max(0.0, float(seconds)))
        INVARIANT_LAST_CHECK.labels(invariant).set(time.time())
    except Exception as exc:
        _failed("record_invariant_check", exc)


def sample_names() -> frozenset[str]:
    """Every sample name these metrics can expose (``_total``, ``_bucket``, ...)."""
    names: set[str] = set()
    for metric in ALL:
        for family in metric.describe():
            suffixes = {
                "counter": ("_total", "_created"),
                "histogram": ("_bucket", "_count", "_sum", "_created"),
                "gauge": ("",),
            }[family.type]
            names.update(family.name + s for s in suffixes)
    return frozenset(names)
