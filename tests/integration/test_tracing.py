"""One trace per event, in-process, with an in-memory exporter: the web's spans (Flask's
server span continuing the provider's traceparent, the claim), the worker's (a run per
attempt, a span per step), the courier's (a client span per attempt, whose context the
callback carries); the trace stored on the event; nothing secret in any attribute."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from sqlalchemy import text

import tests.trace_playbooks  # noqa: F401  (registers the "traced" playbook)
from inbox.domain import callbacks
from inbox.infra import tracing
from inbox.infra.config import Settings
from inbox.services.courier import deliver_once
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.reads import events as event_reads
from inbox.store.reads import search as search_reads
from inbox.store.write import endpoints as estore
from tests.helpers import body_of, hmac_headers
from tests.sink import Sink
from web import create_app

PROVIDER_TRACE = secrets.token_hex(16)
PROVIDER_SPAN = secrets.token_hex(8)
TRACEPARENT = f"00-{PROVIDER_TRACE}-{PROVIDER_SPAN}-01"
HMAC_SECRET = "s3cret-for-tracing"
KEY = "order-42-alice@example.com"
ACCOUNT = "acct-4111111111111111"


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


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    return Settings(database_url=settings.database_url, retry_base_seconds=0.0)


def _named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _hex(n: int, width: int) -> str:
    return f"{n:0{width}x}"


def _setup(engine, make_source, sink: Sink):
    src = make_source(secrets_=(HMAC_SECRET,), playbook="traced", event_type_path="type")
    endpoint_secret = callbacks.new_secret()
    with engine.begin() as conn:
        ep = estore.create_endpoint(
            conn, src.tenant, sink.script("/cb"), endpoint_secret, retry_schedule=[0]
        )
    return src, ep, endpoint_secret


def _post(client, src, traceparent: str | None = TRACEPARENT):
    body = body_of({"type": "traced", "account": ACCOUNT, "fail_times": 1})
    headers = hmac_headers(HMAC_SECRET, body, KEY)
    if traceparent:
        headers["traceparent"] = traceparent
    # a query string a sender might sign or put a token in: never an attribute
    return client.post(f"{src.path}?token=tok-{HMAC_SECRET}", data=body, headers=headers), body


def _run_to_the_callback(engine, wsettings, ep) -> None:
    for _ in range(10):
        drain_once(Runtime(wsettings, engine))
        with engine.connect() as conn:
            if conn.execute(text("SELECT count(*) FROM deliveries")).scalar_one():
                break
    deliver_once(engine, ep.id, allow_private=True)


def test_one_trace_from_the_providers_traceparent_to_the_callbacks(
    spans, settings, wsettings, engine, bell, make_source, sink
):
    src, ep, endpoint_secret = _setup(engine, make_source, sink)
    client = create_app(settings, engine=engine, doorbell=bell, route_cache_seconds=0).test_client()
    answer, body = _post(client, src)
    assert answer.status_code == 202
    event_id = answer.get_json()["id"]
    assert _post(client, src)[0].headers["Idempotent-Replayed"] == "true"
    _run_to_the_callback(engine, wsettings, ep)

    got = spans.get_finished_spans()
    assert {s.context.trace_id for s in got if s.name != "POST /hooks/<tenant>/<source>"} == {
        int(PROVIDER_TRACE, 16)
    }, "every span of the event is in the provider's trace"

    # web: the server span continues the provider's span; the claims are its children
    servers = [s for s in got if s.kind == SpanKind.SERVER]
    assert len(servers) == 2
    assert all(s.parent is not None and s.parent.span_id == int(PROVIDER_SPAN, 16) for s in servers)
    assert all(s.parent.is_remote for s in servers)
    claims = _named(got, "inbox.claim")
    assert [c.attributes["inbox.outcome"] for c in claims] == ["accepted", "duplicate"]
    assert {c.parent.span_id for c in claims} == {s.context.span_id for s in servers}
    assert all(c.attributes["inbox.event_id"] == event_id for c in claims)
    first_claim = claims[0]

    # the event stores the claim's context, and shows its trace id
    with engine.connect() as conn:
        row = conn.execute(text("SELECT trace_id, trace_context FROM events")).one()
        assert row.trace_id == PROVIDER_TRACE
        assert row.trace_context == (
            f"00-{PROVIDER_TRACE}-{_hex(first_claim.context.span_id, 16)}-01"
        )
        detail = event_reads.event_detail(conn, event_id, None)
        assert detail is not None and detail.trace_id == PROVIDER_TRACE
        hits = search_reads.search(conn, PROVIDER_TRACE, None)
        assert [(h.public_id, h.matched) for h in hits] == [(event_id, "trace id")]
        assert search_reads.search(conn, PROVIDER_TRACE.upper(), None)[0].public_id == event_id

    # worker: one run per attempt, each a child of the claim; the retry also linked to it
    runs = sorted(_named(got, "inbox.run"), key=lambda s: s.start_time or 0)
    assert [r.attributes["inbox.attempt"] for r in runs] == [1, 2]
    assert all(r.parent.span_id == first_claim.context.span_id for r in runs)
    assert all(r.kind == SpanKind.CONSUMER for r in runs)
    assert runs[0].status.status_code == StatusCode.ERROR
    assert runs[0].attributes["error.type"] == "RuntimeError"
    assert runs[0].attributes["inbox.outcome"] == "received"
    assert runs[1].attributes["inbox.outcome"] == "completed"
    assert not runs[0].links
    assert [link.context.span_id for link in runs[1].links] == [first_claim.context.span_id]
    assert runs[1].links[0].attributes["inbox.link"] == "retry"

    # a span per step, under its run; the retry skips the recovery point
    steps = _named(got, "inbox.step")
    by_run = {
        r.context.span_id: [
            (s.attributes["inbox.step"], s.attributes.get("inbox.skipped"))
            for s in sorted(steps, key=lambda s: s.start_time or 0)
            if s.parent.span_id == r.context.span_id
        ]
        for r in runs
    }
    assert by_run[runs[0].context.span_id] == [("check", None), ("charge", None)]
    assert by_run[runs[1].context.span_id] == [
        ("check", "recovery_point"),
        ("charge", None),
        ("tell", None),
    ]
    failed_step = next(s for s in steps if s.status.status_code == StatusCode.ERROR)
    assert failed_step.attributes["inbox.step"] == "charge"
    tell = next(s for s in steps if s.attributes["inbox.step"] == "tell")

    # courier: a client span under the step that wrote the delivery; the callback carries it
    (post,) = _named(got, "POST")
    assert post.kind == SpanKind.CLIENT
    assert post.parent.span_id == tell.context.span_id
    assert post.attributes["http.response.status_code"] == 200
    assert post.attributes["server.address"] == "127.0.0.1"
    assert post.attributes["url.full"] == f"http://127.0.0.1:{sink.port}/cb"
    (callback,) = sink.at("/cb")
    assert callback.headers["traceparent"] == (
        f"00-{PROVIDER_TRACE}-{_hex(post.context.span_id, 16)}-01"
    )

    # nothing secret, signed or keyed in any attribute of any span
    forbidden = [
        HMAC_SECRET,
        KEY,
        ACCOUNT,
        hmac_headers(HMAC_SECRET, body, KEY)["X-Signature"][:16],
        endpoint_secret,
        endpoint_secret.removeprefix("whsec_"),
        callback.headers["webhook-signature"].split(",")[-1][:16],
        "token",
    ]
    for s in got:
        values = [json.dumps(dict(s.attributes or {}), default=str)]
        values += [json.dumps(dict(e.attributes or {}), default=str) for e in s.events]
        values += [json.dumps(dict(link.attributes or {}), default=str) for link in s.links]
        leaked = [f for f in forbidden if any(f in v for v in values)]
        assert not leaked, f"{s.name} exports {leaked}: {s.attributes}"


def test_a_request_without_traceparent_starts_the_events_trace(
    spans, settings, wsettings, engine, bell, make_source, sink
):
    src, ep, _ = _setup(engine, make_source, sink)
    client = create_app(settings, engine=engine, doorbell=bell, route_cache_seconds=0).test_client()
    assert _post(client, src, traceparent=None)[0].status_code == 202
    _run_to_the_callback(engine, wsettings, ep)
    got = spans.get_finished_spans()
    (server,) = [s for s in got if s.kind == SpanKind.SERVER]
    assert server.parent is None
    assert {s.context.trace_id for s in got} == {server.context.trace_id}
    (callback,) = sink.at("/cb")
    assert callback.headers["traceparent"].split("-")[1] == _hex(server.context.trace_id, 32)


def test_tracing_off_stores_and_sends_nothing(settings, wsettings, engine, bell, make_source, sink):
    assert not tracing.enabled()
    assert tracing.span("inbox.claim").__enter__() is None
    assert tracing.traceparent() is None and tracing.current_ids() is None
    src, ep, _ = _setup(engine, make_source, sink)
    client = create_app(settings, engine=engine, doorbell=bell, route_cache_seconds=0).test_client()
    assert _post(client, src)[0].status_code == 202
    _run_to_the_callback(engine, wsettings, ep)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT trace_id, trace_context FROM events")).one() == (
            None,
            None,
        )
        assert conn.execute(text("SELECT trace_context FROM deliveries")).scalar_one() is None
    (callback,) = sink.at("/cb")
    assert "traceparent" not in callback.headers


def test_the_trace_id_is_on_the_console_page_in_the_api_and_found_by_search(
    spans, settings, engine, bell, make_source, sink
):
    from tests.integration.ui_support import new_token, sign_in

    src, _, _ = _setup(engine, make_source, sink)
    app = create_app(settings, engine=engine, doorbell=bell, route_cache_seconds=0)
    client = app.test_client()
    event_id = _post(client, src)[0].get_json()["id"]
    token = new_token(engine, "tracer", "viewer")
    doc = client.get(
        f"/api/v1/events/{event_id}", headers={"Authorization": f"Bearer {token}"}
    ).get_json()
    assert doc["trace_id"] == PROVIDER_TRACE
    assert doc["trace_context"].startswith(f"00-{PROVIDER_TRACE}-")
    sign_in(client, token)
    page = client.get(f"/ui/events/{event_id}").get_data(as_text=True)
    assert f'<code class="mono" id="trace-id">{PROVIDER_TRACE}</code>' in page
    found = client.get(f"/ui/search?q={PROVIDER_TRACE}")  # one hit: straight to it
    assert found.status_code == 302 and found.headers["Location"].endswith(f"/events/{event_id}")
