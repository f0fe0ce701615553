"""One trace per event across real processes: the web, a worker and a courier export OTLP
over HTTP (protobuf) to a collector in this test; the provider's traceparent starts the
trace and the callback the sink receives carries it on. With tracing off nothing is sent."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from inbox.domain import callbacks
from inbox.store.write import endpoints as estore
from tests.brokers import Broker
from tests.e2e.test_worker_processes import wait_for
from tests.helpers import body_of, hmac_headers
from tests.otlp_collector import Collector, Span
from tests.procs import CeleryProc, Web
from tests.sink import Sink

pytestmark = pytest.mark.e2e

SERVER, CLIENT, CONSUMER = 2, 3, 5  # opentelemetry.proto.trace.v1.Span.SpanKind
ERROR = 2  # Status.StatusCode


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.close()


@pytest.fixture
def broker_kind() -> str:
    return "redis"  # the trace never travels through the broker: one kind is enough


def _env(database_url: str, broker: Broker, collector: Collector, on: bool) -> dict:
    return {
        "DATABASE_URL": database_url,
        **broker.env,
        "INBOX_SWEEP_SECONDS": "1",
        "INBOX_LEASE_SECONDS": "5",
        "INBOX_RETRY_BASE_SECONDS": "0.2",
        "INBOX_ALLOW_PRIVATE_TARGETS": "1",
        "INBOX_PLAYBOOKS": "tests.trace_playbooks",
        "OTEL_TRACES_EXPORTER": "otlp" if on else None,
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,  # set either way: off sends nothing
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": None,
        "OTEL_SERVICE_NAME": None,
        "OTEL_TRACES_SAMPLER": None,
        "OTEL_PROPAGATORS": None,
        "OTEL_BSP_SCHEDULE_DELAY": "200",  # ms: export soon after each span ends
    }


def _start(env: dict, procs: list, make_source, engine, sink: Sink):
    web = Web(env)
    procs.append(web)
    src = make_source(playbook="traced", event_type_path="type")
    with engine.begin() as conn:
        estore.create_endpoint(
            conn, src.tenant, sink.script("/cb"), callbacks.new_secret(), retry_schedule=[0]
        )
    procs += [CeleryProc(env), CeleryProc(env, kind="courier", concurrency=2)]
    return web, src


def _send(web: Web, src, traceparent: str | None) -> dict[str, str]:
    body = body_of({"type": "traced", "account": "acct-7", "fail_times": 1})
    headers = hmac_headers("s3cret", body, "order-7")
    if traceparent:
        headers["traceparent"] = traceparent
    assert web.request("POST", src.path, body, headers)[0] == 202
    return headers


def _delivered(engine) -> bool:
    with engine.connect() as conn:
        return (
            conn.execute(
                text("SELECT count(*) FROM deliveries WHERE state = 'delivered'")
            ).scalar_one()
            == 1
        )


def _one(spans: list[Span], name: str) -> Span:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, f"{name}: {found}"
    return found[0]


def test_one_trace_from_the_providers_traceparent_to_the_callback(
    database_url, broker, collector, procs, make_source, engine, sink
):
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    web, src = _start(
        _env(database_url, broker, collector, on=True), procs, make_source, engine, sink
    )
    sent = _send(web, src, f"00-{trace_id}-{parent}-01")
    wait_for(lambda: _delivered(engine), 90, "the callback")
    (callback,) = sink.at("/cb")
    _, cb_trace, cb_span, _ = callback.headers["traceparent"].split("-")
    assert cb_trace == trace_id

    def exported() -> list[Span]:
        return [s for s in collector.snapshot() if s.trace_id == trace_id]

    wait_for(lambda: any(s.span_id == cb_span for s in exported()), 60, "the courier's span")
    wait_for(lambda: len([s for s in exported() if s.name == "inbox.run"]) == 2, 60, "the runs")
    spans = exported()

    server = next(s for s in spans if s.kind == SERVER and s.name.startswith("POST /hooks"))
    assert server.parent_span_id == parent and server.process == "web"
    claim = _one(spans, "inbox.claim")
    assert claim.parent_span_id == server.span_id
    assert claim.attributes["inbox.outcome"] == "accepted"
    assert claim.attributes["inbox.tenant"] == src.tenant

    runs = sorted(
        (s for s in spans if s.name == "inbox.run"), key=lambda s: s.attributes["inbox.attempt"]
    )
    assert [r.attributes["inbox.attempt"] for r in runs] == [1, 2]
    assert all(r.parent_span_id == claim.span_id and r.kind == CONSUMER for r in runs)
    assert all(r.process == "celery" for r in runs)
    assert runs[0].status_code == ERROR and runs[0].attributes["error.type"] == "RuntimeError"
    assert [(x.span_id, x.attributes["inbox.link"]) for x in runs[1].links] == [
        (claim.span_id, "retry")
    ]
    steps = [s for s in spans if s.name == "inbox.step"]
    assert {(s.parent_span_id, s.attributes["inbox.step"]) for s in steps} == {
        (runs[0].span_id, "check"),
        (runs[0].span_id, "charge"),
        (runs[1].span_id, "check"),
        (runs[1].span_id, "charge"),
        (runs[1].span_id, "tell"),
    }
    skipped = [s for s in steps if s.attributes.get("inbox.skipped") == "recovery_point"]
    assert [(s.parent_span_id, s.attributes["inbox.step"]) for s in skipped] == [
        (runs[1].span_id, "check")
    ]
    tell = next(s for s in steps if s.attributes["inbox.step"] == "tell")
    post = next(s for s in spans if s.span_id == cb_span)
    assert post.kind == CLIENT and post.name == "POST" and post.parent_span_id == tell.span_id
    assert post.attributes["http.response.status_code"] == 200
    # the official SQLAlchemy instrumentation's statements are in the event's trace too
    assert any(
        s.attributes.get("db.system") == "postgresql" for s in spans if s.process == "celery"
    )

    with engine.connect() as conn:
        assert conn.execute(text("SELECT trace_id FROM events")).scalar_one() == trace_id
    # nothing secret, signed, keyed or from the body in anything any process exported
    signature = sent["X-Signature"][:12]
    for s in collector.snapshot():
        exported = repr((s.attributes, [x.attributes for x in s.links]))
        for leak in (
            "s3cret",
            "order-7",
            "acct-7",
            signature,
            callback.headers["webhook-signature"][-16:],
        ):
            assert leak not in exported, (s.name, leak, s.attributes)


def test_nothing_is_exported_when_tracing_is_off(
    database_url, broker, collector, procs, make_source, engine, sink
):
    web, src = _start(
        _env(database_url, broker, collector, on=False), procs, make_source, engine, sink
    )
    _send(web, src, f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01")
    wait_for(lambda: _delivered(engine), 90, "the callback")
    (callback,) = sink.at("/cb")
    assert "traceparent" not in callback.headers
    with engine.connect() as conn:
        assert conn.execute(text("SELECT trace_id FROM events")).scalar_one() is None
    for p in procs:
        p.stop()  # every process gone: whatever it would have exported is sent by now
    assert collector.requests == 0 and collector.snapshot() == []
