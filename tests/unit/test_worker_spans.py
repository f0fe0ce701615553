"""The worker's spans, in memory, against the in-memory store: a step span whose work was
skipped says why (a newer event decided, another event did the fact), and no span carries
the payload."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from inbox.domain.playbooks import Playbook, Registry, StepContext
from inbox.infra import tracing
from inbox.infra.config import Settings
from inbox.services.drain import drain_once
from inbox.testing import InMemoryStore
from tests.unit.fake_store import offline

SETTINGS = Settings(batch_size=10, lease_seconds=60)
STORED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.install(None)
        provider.shutdown()


def _steps(spans: InMemorySpanExporter, event: str) -> list[tuple[str, Any]]:
    return [
        (s.attributes["inbox.step"], s.attributes.get("inbox.skipped"))
        for s in spans.get_finished_spans()
        if s.name == "inbox.step" and s.attributes["inbox.event_id"] == event
    ]


def test_a_duplicate_fact_is_an_attribute_of_its_step(spans):
    store = InMemoryStore()
    bk = b"\x02" * 32
    body = json.dumps({"account": "acct-secret-4111"}).encode()
    for n in (1, 2):
        store.add_event(
            body=body, business_key_digest=bk, public_id=f"evt_{n}", trace_context=STORED
        )
    pb = Playbook("deny")

    @pb.step("deny", once_per_business_key=True)
    def deny(ctx: StepContext) -> dict[str, Any]:
        return {"denied": True}

    reg = Registry()
    reg.register(pb)
    drain_once(offline(SETTINGS), reg=reg, store=store)
    assert _steps(spans, "evt_1") == [("deny", None)]
    assert _steps(spans, "evt_2") == [("deny", "duplicate_fact")]
    runs = [s for s in spans.get_finished_spans() if s.name == "inbox.run"]
    assert {r.attributes["inbox.outcome"] for r in runs} == {"completed"}
    assert {f"{r.parent.trace_id:032x}" for r in runs} == {STORED.split("-")[1]}
    assert {f"{r.parent.span_id:016x}" for r in runs} == {STORED.split("-")[2]}
    exported = json.dumps([dict(s.attributes or {}) for s in spans.get_finished_spans()])
    assert "acct-secret" not in exported


def test_a_stale_step_is_an_attribute_of_its_step(spans):
    store = InMemoryStore()
    bk = b"\x03" * 32
    options = {"occurred_at_path": "at"}
    newer = json.dumps({"at": "2026-01-02T00:00:00Z"}).encode()
    older = json.dumps({"at": "2026-01-01T00:00:00Z"}).encode()
    store.add_event(body=newer, business_key_digest=bk, public_id="evt_new", source_options=options)
    pb = Playbook("review")

    @pb.step("close", skip_if_stale=True)
    def close(ctx: StepContext) -> dict[str, Any]:
        return {"closed": True}

    reg = Registry()
    reg.register(pb)
    drain_once(offline(SETTINGS), reg=reg, store=store)
    store.add_event(body=older, business_key_digest=bk, public_id="evt_old", source_options=options)
    drain_once(offline(SETTINGS), reg=reg, store=store)
    assert _steps(spans, "evt_new") == [("close", None)]
    assert _steps(spans, "evt_old") == [("close", "stale")]
