"""deploy/grafana/webhook-inbox.json: a well-formed dashboard whose every query names metrics
that a real /metrics scrape exposes, with the labels it groups and filters by.

Renaming a metric or a label in inbox/infra/metrics.py or web/metrics.py breaks this test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.unit.test_alert_rules import exposed
from web import create_app

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "webhook-inbox.json"
METRIC = re.compile(r"\binbox_[a-z0-9_]+\b")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
MATCHER = re.compile(r"\b([a-z_]+)\s*=~?\s*\"")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def dashboard() -> dict:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] and doc["title"]
    return doc


def queries(doc: dict) -> list[str]:
    out = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    out += [v["definition"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return out


def scraped(settings, engine, bell) -> set[str]:
    """Every sample name a real scrape can carry, by the families' types (a counter with
    no series yet is announced by its HELP and TYPE lines)."""
    app = create_app(settings, engine=engine, doorbell=bell, route_cache_seconds=0)
    resp = app.test_client().get("/metrics")
    assert resp.status_code == 200
    names: set[str] = set()
    for family in text_string_to_metric_families(resp.get_data(as_text=True)):
        names.update(family.name + s for s in SUFFIXES.get(family.type, ("",)))
    return names


def test_the_dashboard_is_well_formed():
    doc = dashboard()
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert {"datasource", "tenant", "source"} <= variables
    graphs = [p for p in doc["panels"] if p["type"] != "row"]
    assert len(graphs) >= 12
    for p in graphs:
        assert p["title"] and p["targets"], p
        assert p["datasource"]["uid"] == "${datasource}"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))


def test_every_metric_and_label_the_dashboard_queries_exists_on_metrics(settings, engine, bell):
    on_metrics = scraped(settings, engine, bell)
    labels = exposed()
    used_anywhere: set[str] = set()
    for expr in queries(dashboard()):
        used = set(METRIC.findall(expr))
        assert used, f"{expr} names no inbox metric"
        used_anywhere |= used
        missing = used - on_metrics
        assert not missing, f"{expr}: not on /metrics: {missing}"
        named = {g.strip() for grp in GROUPING.findall(expr) for g in grp.split(",") if g.strip()}
        named |= set(MATCHER.findall(expr))
        named |= {"tenant", "source"} & set(re.findall(r"label_values\([^,]+,\s*(\w+)\)", expr))
        for name in used:
            unknown = (
                named - labels[name] - {"le"} if name.endswith("_bucket") else named - labels[name]
            )
            assert not unknown, f"{expr}: {name} has no label {unknown}"
    # the dashboard shows every family the code exposes (a new metric gets a panel)
    families = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in used_anywhere}
    exposed_families = {re.sub(r"_(total|bucket|count|sum|created)$", "", n) for n in labels}
    assert exposed_families <= families, exposed_families - families


def test_the_check_itself_catches_a_renamed_metric(settings, engine, bell):
    on_metrics = scraped(settings, engine, bell)
    assert "inbox_events_accepted_total" in on_metrics
    assert "inbox_event_processing_seconds_bucket" in on_metrics
    assert "inbox_depth" in on_metrics
    assert "inbox_events_accepted" not in on_metrics  # a counter's samples end in _total
