"""Tracing is configured by the OTEL_* variables alone, and off (nothing installed) by
default; a setting it cannot honour leaves it off with one line that says why."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from opentelemetry import trace

from inbox.infra import tracing
from inbox.infra.config import Settings


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    yield
    tracing.install(None)


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    for name in (
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings.from_env()


@pytest.mark.parametrize("value", [None, "", "none", " NONE "])
def test_unset_or_none_is_off_with_no_provider_installed(monkeypatch, caplog, value):
    env = {} if value is None else {"OTEL_TRACES_EXPORTER": value}
    with caplog.at_level(logging.DEBUG):
        assert tracing.configure(_settings(monkeypatch, **env), "web") is False
    assert not tracing.enabled() and tracing.provider() is None
    assert not caplog.records  # off is the default: nothing to say
    # the global provider is still the API's proxy, not an SDK provider
    assert type(trace.get_tracer_provider()).__module__.startswith("opentelemetry.trace")
    # every helper is a no-op
    assert tracing.span("inbox.claim").__enter__() is None
    headers: dict[str, str] = {}
    tracing.inject(headers)
    assert headers == {} and tracing.traceparent() is None


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER names zipkin"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL is grpc; supported: http/protobuf",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_PROTOCOL is http/json",
        ),
    ],
)
def test_what_cannot_be_honoured_is_off_with_one_line(monkeypatch, caplog, env, says):
    with caplog.at_level(logging.INFO):
        assert tracing.configure(_settings(monkeypatch, **env), "web") is False
    assert not tracing.enabled()
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and says in record.getMessage()
    assert record.getMessage().startswith("tracing off: ")


def test_missing_packages_are_off_with_one_line(monkeypatch, caplog):
    def missing(names, process):
        raise ModuleNotFoundError("No module named 'opentelemetry.sdk'", name="opentelemetry.sdk")

    monkeypatch.setattr(tracing, "_make_provider", missing)
    with caplog.at_level(logging.INFO):
        assert tracing.configure(_settings(monkeypatch, OTEL_TRACES_EXPORTER="otlp"), "x") is False
    (record,) = caplog.records
    assert "install webhook-inbox[otel]" in record.getMessage()
    assert "opentelemetry.sdk" in record.getMessage()


def test_the_provider_reads_the_standard_variables(monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "inbox-eu-1")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    provider = tracing._make_provider(["console"], "celery")
    try:
        assert provider.resource.attributes["service.name"] == "inbox-eu-1"
        assert provider.resource.attributes["inbox.process"] == "celery"
        assert "0.25" in provider.sampler.get_description()
    finally:
        provider.shutdown()
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    provider = tracing._make_provider(["console"], "web")
    try:
        assert provider.resource.attributes["service.name"] == "webhook-inbox"
    finally:
        provider.shutdown()


def test_trace_id_of_a_stored_traceparent():
    tid = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert tracing.trace_id_of(f"00-{tid}-00f067aa0ba902b7-01") == tid
    assert tracing.trace_id_of(None) is None and tracing.trace_id_of("garbage") is None
