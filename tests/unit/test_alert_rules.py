"""deploy/prometheus/alerts.yml: well formed, and naming only metrics the code exposes.

Renaming a metric (or a label used in ``by (...)``) in inbox/metrics.py or web/metrics.py
breaks these tests. When ``promtool`` is installed the rules are also checked by it and
each alert is run against synthetic series (``promtool test rules``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import Histogram

from inbox.infra import metrics
from web.metrics import StatsCollector, ViolationsCollector

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
REQUIRED = {
    "InboxDeadLettersGrowing",
    "InboxDuplicateSurge",
    "InboxIdempotencyConflict",
    "InboxOldestPendingTooOld",
    "InboxEndpointCircuitOpen",
    "InboxEndpointDeliveriesHeld",
    "InboxEndpointFailureRate",
    "InboxLaneBlocked",
}
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
METRIC = re.compile(r"\binbox_[a-z0-9_]+\b")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    assert isinstance(doc, dict) and set(doc) == {"groups"}
    out = []
    for group in doc["groups"]:
        assert group["name"] and isinstance(group["rules"], list) and group["rules"]
        out.extend(group["rules"])
    return out


def exposed() -> dict[str, set[str]]:
    """Sample name → label names, for everything /metrics can expose."""
    names: dict[str, set[str]] = {}
    for metric in metrics.ALL:
        labels = set(metric._labelnames)
        if isinstance(metric, Histogram):
            labels.add("le")
        for family in metric.describe():
            for suffix in ("", "_total", "_created", "_bucket", "_count", "_sum"):
                if family.name + suffix in metrics.sample_names():
                    names[family.name + suffix] = labels
    # The scrape-time gauges: their label names are fixed in the collector.
    labels_of = {
        "inbox_depth": {"tenant", "source", "state"},
        "inbox_oldest_pending_age_seconds": {"tenant", "source"},
        "inbox_dead_letters": {"tenant", "source"},
        "inbox_delivery_backlog": {"tenant", "state"},
        "inbox_oldest_pending_delivery_age_seconds": {"tenant"},
        "inbox_lanes_blocked": {"tenant", "source"},
        "inbox_lane_held_events": {"tenant", "source"},
        "inbox_stats_up": set(),
        "inbox_endpoint_state": {"tenant", "endpoint", "state"},
        "inbox_endpoint_held_deliveries": {"tenant", "endpoint"},
        "inbox_endpoint_held_oldest_age_seconds": {"tenant", "endpoint"},
        "inbox_endpoint_failure_rate": {"tenant", "endpoint"},
    }
    described = {f.name for f in StatsCollector(engine=None).describe()}  # type: ignore[arg-type]
    assert described == set(labels_of)
    names.update(labels_of)
    violations = {"inbox_invariant_violations_open": {"invariant"}}
    described = {f.name for f in ViolationsCollector(engine=None).describe()}  # type: ignore[arg-type]
    assert described == set(violations)
    names.update(violations)
    return names


def test_rules_are_well_formed_and_cover_the_required_alerts():
    found = rules()
    assert REQUIRED <= {r["alert"] for r in found}
    for rule in found:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}
        assert isinstance(rule["expr"], str) and rule["expr"].strip()
        assert DURATION.match(str(rule["for"])), rule["alert"]
        assert rule["labels"]["severity"] in {"page", "warning", "ticket"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_every_metric_and_grouping_label_in_an_expression_exists():
    known = exposed()
    for rule in rules():
        used = set(METRIC.findall(rule["expr"]))
        assert used, f"{rule['alert']} names no inbox metric"
        unknown = used - set(known)
        assert not unknown, f"{rule['alert']} uses metrics the code does not expose: {unknown}"
        for group in GROUPING.findall(rule["expr"]):
            labels = {g.strip() for g in group.split(",") if g.strip()}
            for name in used:
                missing = labels - known[name]
                assert not missing, f"{rule['alert']}: {name} has no label {missing}"


def test_the_check_itself_catches_a_renamed_metric():
    known = exposed()
    assert "inbox_duplicate_deliveries_total" in known
    assert "inbox_duplicate_deliveries" not in known  # the bare counter name is not a sample
    assert "inbox_oldest_pending_age_seconds" in known
    assert "inbox_idempotency_conflicts_total" in known
    assert "inbox_event_processing_seconds_bucket" in known


promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")


@promtool
def test_promtool_checks_the_rules():
    proc = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _render(template: str, labels: dict[str, str], value: str) -> str:
    """The few Go-template forms alerts.yml uses, rendered as Prometheus would."""
    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
    return re.sub(r"\{\{ \$value( \| \w+)? \}\}", value, out)


def _alert(name: str, at: str, *fired: tuple[dict[str, str], str]) -> dict:
    """Expect ``name`` at ``at`` to fire exactly for ``fired`` (labels, rendered $value)."""
    [rule] = [r for r in rules() if r["alert"] == name]
    exp = [
        {
            "exp_labels": {**labels, **rule["labels"]},
            "exp_annotations": {
                k: _render(v, labels, value) for k, v in rule["annotations"].items()
            },
        }
        for labels, value in fired
    ]
    return {"eval_time": at, "alertname": name, "exp_alerts": exp}


SCENARIOS = {
    "tests": [
        {
            "interval": "1m",
            "input_series": [
                # one more dead letter every minute for one source; a flat count for another
                {"series": 'inbox_dead_letters{tenant="a",source="grow"}', "values": "0+1x60"},
                {"series": 'inbox_dead_letters{tenant="a",source="flat"}', "values": "7x60"},
            ],
            "alert_rule_test": [
                _alert("InboxDeadLettersGrowing", "20m"),  # growing, but not yet for 30m
                _alert("InboxDeadLettersGrowing", "50m", ({"tenant": "a", "source": "grow"}, "50")),
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                # 3/min for 80 minutes, then 150/min: a fiftyfold jump
                {
                    "series": 'inbox_duplicate_deliveries_total{tenant="a",source="s"}',
                    "values": "0+3x80 240+150x20",
                },
                # a steady 150/min: high, but no jump
                {
                    "series": 'inbox_duplicate_deliveries_total{tenant="b",source="s"}',
                    "values": "0+150x100",
                },
            ],
            "alert_rule_test": [
                _alert("InboxDuplicateSurge", "75m"),
                _alert("InboxDuplicateSurge", "92m", ({"tenant": "a", "source": "s"}, "2.5")),
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                # first seen at 1 (the series did not exist before the conflict)
                {
                    "series": 'inbox_idempotency_conflicts_total{tenant="a",source="new"}',
                    "values": "_x20 1x20",
                },
                # grows from 2 to 3 at minute 30
                {
                    "series": 'inbox_idempotency_conflicts_total{tenant="a",source="old"}',
                    "values": "2x30 3x10",
                },
                # unchanged for 40 minutes
                {
                    "series": 'inbox_idempotency_conflicts_total{tenant="a",source="calm"}',
                    "values": "5x40",
                },
            ],
            "alert_rule_test": [
                _alert("InboxIdempotencyConflict", "15m"),
                _alert("InboxIdempotencyConflict", "25m", ({"tenant": "a", "source": "new"}, "1")),
                _alert("InboxIdempotencyConflict", "32m", ({"tenant": "a", "source": "old"}, "1")),
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": 'inbox_oldest_pending_age_seconds{tenant="a",source="stuck"}',
                    "values": "240+60x10",
                },
                {
                    "series": 'inbox_oldest_pending_age_seconds{tenant="a",source="ok"}',
                    "values": "3x10",
                },
                {"series": "inbox_stats_up", "values": "1x10"},
            ],
            "alert_rule_test": [
                _alert("InboxOldestPendingTooOld", "2m"),  # 360 s, but not yet for 2m
                _alert(
                    "InboxOldestPendingTooOld", "4m", ({"tenant": "a", "source": "stuck"}, "8m 0s")
                ),
                _alert("InboxStatsUnavailable", "9m"),
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                # two events imported at minute 30; another source never had a gap
                {
                    "series": 'inbox_reconcile_gaps_filled_total{tenant="a",source="gap",'
                    'action="imported"}',
                    "values": "0x30 2x30",
                },
                {
                    "series": 'inbox_reconcile_gaps_filled_total{tenant="a",source="calm",'
                    'action="imported"}',
                    "values": "0x60",
                },
            ],
            "alert_rule_test": [
                _alert("InboxReconcileGapsFilled", "20m"),
                _alert("InboxReconcileGapsFilled", "40m", ({"tenant": "a", "source": "gap"}, "")),
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                # one endpoint's circuit open from minute 5; another's open for 2 minutes only
                {
                    "series": 'inbox_endpoint_state{tenant="a",endpoint="ep_down",'
                    'state="open_circuit"}',
                    "values": "0x5 1x30",
                },
                {
                    "series": 'inbox_endpoint_state{tenant="a",endpoint="ep_blip",'
                    'state="open_circuit"}',
                    "values": "0x5 1x2 0x28",
                },
                # held deliveries an hour old and growing older; fresh ones elsewhere
                {
                    "series": 'inbox_endpoint_held_oldest_age_seconds{tenant="a",'
                    'endpoint="ep_off"}',
                    "values": "3000+60x30",
                },
                {
                    "series": 'inbox_endpoint_held_oldest_age_seconds{tenant="a",'
                    'endpoint="ep_new"}',
                    "values": "60x30",
                },
                # half of the attempts fail from minute 0; another at 5 %
                {
                    "series": 'inbox_endpoint_failure_rate{tenant="a",endpoint="ep_bad"}',
                    "values": "0.5x30",
                },
                {
                    "series": 'inbox_endpoint_failure_rate{tenant="a",endpoint="ep_ok"}',
                    "values": "0.05x30",
                },
            ],
            "alert_rule_test": [
                _alert("InboxEndpointCircuitOpen", "7m"),  # open, but not for 5m yet
                _alert(
                    "InboxEndpointCircuitOpen", "12m", ({"tenant": "a", "endpoint": "ep_down"}, "1")
                ),
                _alert("InboxEndpointDeliveriesHeld", "5m"),  # 55 min: not yet an hour
                _alert(
                    "InboxEndpointDeliveriesHeld",
                    "20m",
                    ({"tenant": "a", "endpoint": "ep_off"}, "1h 10m 0s"),
                ),
                _alert("InboxEndpointFailureRate", "5m"),
                _alert(
                    "InboxEndpointFailureRate",
                    "15m",
                    ({"tenant": "a", "endpoint": "ep_bad"}, "50%"),
                ),
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                # blocked from minute 6 on; another source blocked for 3 minutes only
                {"series": 'inbox_lanes_blocked{tenant="a",source="held"}', "values": "0x5 2x30"},
                {"series": 'inbox_lanes_blocked{tenant="a",source="brief"}', "values": "1x2 0x30"},
            ],
            "alert_rule_test": [
                _alert("InboxLaneBlocked", "10m"),  # blocked, but not yet for 10m
                _alert("InboxLaneBlocked", "20m", ({"tenant": "a", "source": "held"}, "2")),
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                # two lane violations open from minute 5; no event_state violation
                {
                    "series": 'inbox_invariant_violations_open{invariant="lane_order"}',
                    "values": "0x5 2x5",
                },
                {
                    "series": 'inbox_invariant_violations_open{invariant="event_state"}',
                    "values": "0x10",
                },
            ],
            "alert_rule_test": [
                _alert("InboxInvariantViolated", "3m"),
                _alert("InboxInvariantViolated", "7m", ({"invariant": "lane_order"}, "2")),
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                # checked every minute; the other last checked at minute 10
                {
                    "series": "inbox_invariant_last_check_timestamp_seconds"
                    '{invariant="event_state"}',
                    "values": "0+60x40",
                },
                {
                    "series": "inbox_invariant_last_check_timestamp_seconds"
                    '{invariant="lane_order"}',
                    "values": "0+60x10 600x30",
                },
            ],
            "alert_rule_test": [
                _alert("InboxInvariantNotChecked", "20m"),
                _alert("InboxInvariantNotChecked", "31m", ({"invariant": "lane_order"}, "21m 0s")),
            ],
        },
    ],
}


@promtool
def test_promtool_fires_each_alert_only_when_it_should(tmp_path: Path):
    spec = {"rule_files": [str(RULES)], "evaluation_interval": "1m", **SCENARIOS}
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
