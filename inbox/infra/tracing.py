"""OpenTelemetry traces, configured by the standard ``OTEL_*`` variables alone.

``OTEL_TRACES_EXPORTER`` turns tracing on (``otlp``, ``console``, or both, comma-separated);
unset or ``none`` leaves it off: no tracer provider is installed, no instrumentation is
applied, and every helper here is a check of one module global. The SDK reads the rest
itself: ``OTEL_SERVICE_NAME`` (default ``webhook-inbox``), ``OTEL_TRACES_SAMPLER``,
``OTEL_EXPORTER_OTLP_ENDPOINT`` and the other exporter variables, ``OTEL_PROPAGATORS``
(default ``tracecontext,baggage``). OTLP goes over ``http/protobuf``, through a batch span
processor. The packages come with the ``otel`` extra; without them tracing stays off
and one log line says why.

One trace follows an event: the ingest span's context is stored on the event as a W3C
``traceparent`` (``traceparent()`` while the claim runs), the worker continues from it
(``span(..., parent=stored)``), and a step that writes deliveries stores its own context
on them for the courier, which sends a ``traceparent`` of the same trace with each
callback. The broker carries row ids only; the trace never travels through it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

from inbox.infra.config import Settings

log = logging.getLogger(__name__)

SUPPORTED_EXPORTERS = ("otlp", "console")
SUPPORTED_PROTOCOLS = ("", "http/protobuf")
DEFAULT_SERVICE = "webhook-inbox"

Attributes = Mapping[str, str | int | float | bool]

# Set while tracing is on in this process; None (the only check made) while it is off.
_provider: Any = None
_tracer: Any = None
_NOOP: contextlib.nullcontext[None] = contextlib.nullcontext()


def enabled() -> bool:
    return _tracer is not None


def exporters(settings: Settings) -> list[str]:
    """The exporters OTEL_TRACES_EXPORTER names (empty: tracing off)."""
    names = [n.strip().lower() for n in settings.traces_exporter.split(",")]
    return [n for n in names if n and n != "none"]


def configure(settings: Settings, process: str) -> bool:
    """Install a tracer provider for this process if OTEL_TRACES_EXPORTER asks for one.

    Returns whether tracing is on. A second call keeps the first provider.
    """
    if _tracer is not None:
        return True
    names = exporters(settings)
    if not names:
        return False
    unknown = sorted(set(names) - set(SUPPORTED_EXPORTERS))
    if unknown:
        log.warning(
            "tracing off: OTEL_TRACES_EXPORTER names %s; supported: otlp, console, none",
            ", ".join(unknown),
            extra={"outcome": "tracing_off"},
        )
        return False
    protocol = settings.otlp_traces_protocol or settings.otlp_protocol
    if "otlp" in names and protocol not in SUPPORTED_PROTOCOLS:
        log.warning(
            "tracing off: OTEL_EXPORTER_OTLP_PROTOCOL is %s; supported: http/protobuf",
            protocol,
            extra={"outcome": "tracing_off"},
        )
        return False
    try:
        provider = _make_provider(names, process)
    except ImportError as exc:
        log.warning(
            "tracing off: OTEL_TRACES_EXPORTER is set but the OpenTelemetry packages are not"
            " installed (%s); install webhook-inbox[otel]",
            exc.name,
            extra={"outcome": "tracing_off"},
        )
        return False
    from opentelemetry import trace

    trace.set_tracer_provider(provider)
    install(provider)
    _instrument_libraries(provider)
    log.info(
        "tracing on: exporting to %s",
        ", ".join(names),
        extra={"outcome": "tracing_on", "inbox_process": process},
    )
    return True


def _make_provider(names: Sequence[str], process: str) -> Any:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    resource = Resource.create({"inbox.process": process})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE}))
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    return provider


def install(provider: Any) -> None:
    """Use ``provider`` for this module's spans (``configure``, and tests' in-memory ones)."""
    global _provider, _tracer
    _provider = provider
    _tracer = None if provider is None else provider.get_tracer("inbox")


def provider() -> Any:
    return _provider


def shutdown() -> None:
    """Export what is buffered and stop (a process about to exit)."""
    if _provider is not None:
        _provider.shutdown()


@contextlib.contextmanager
def _span(
    name: str,
    kind: str,
    attributes: Attributes | None,
    parent: str | None,
    link: str | None,
    link_attributes: Attributes | None,
) -> Iterator[Any]:
    from opentelemetry.trace import Link, SpanKind

    context = _context_of(parent) if parent else None
    links = []
    if link:
        ctx = _span_context_of(link)
        if ctx is not None:
            links.append(Link(ctx, link_attributes))
    with _tracer.start_as_current_span(
        name,
        context=context,
        kind=getattr(SpanKind, kind),
        attributes=attributes,
        links=links,
        record_exception=False,  # a message may carry data: error.type says the class
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            failed(current, exc)
            raise


def span(
    name: str,
    kind: str = "INTERNAL",
    attributes: Attributes | None = None,
    parent: str | None = None,
    link: str | None = None,
    link_attributes: Attributes | None = None,
) -> contextlib.AbstractContextManager[Any]:
    """A span around a block, current inside it; yields None while tracing is off.

    ``parent``: a stored ``traceparent`` to continue (else the current span's child);
    ``link``: a stored ``traceparent`` this span follows from. An exception leaving the
    block marks the span as an error with its class (``error.type``), never its message.
    """
    if _tracer is None:
        return _NOOP
    return _span(name, kind, attributes, parent, link, link_attributes)


def start_span(
    name: str,
    kind: str = "INTERNAL",
    attributes: Attributes | None = None,
    parent: str | None = None,
    link: str | None = None,
    link_attributes: Attributes | None = None,
) -> Any:
    """A span started but not made current (``using`` makes it current for a block, from any
    thread; ``end_span`` ends it): for work whose blocks interleave, as the events of a
    batch run in lockstep do. None while tracing is off."""
    if _tracer is None:
        return None
    from opentelemetry.trace import Link, SpanKind

    links = []
    if link:
        ctx = _span_context_of(link)
        if ctx is not None:
            links.append(Link(ctx, link_attributes))
    return _tracer.start_span(
        name,
        context=_context_of(parent) if parent else None,
        kind=getattr(SpanKind, kind),
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    )


@contextlib.contextmanager
def using(current: Any) -> Iterator[Any]:
    """``current`` (a ``start_span`` span, or None) is the current span inside the block;
    leaving the block does not end it."""
    if current is None:
        yield None
        return
    from opentelemetry.trace import use_span

    with use_span(current, end_on_exit=False, record_exception=False):
        yield current


def end_span(current: Any) -> None:
    if current is not None:
        current.end()


def current_span() -> Any:
    """The current span (None while tracing is off)."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    return trace.get_current_span()


def set_attributes(current: Any, attributes: Attributes) -> None:
    """Attributes on a span ``span`` yielded (nothing while tracing is off)."""
    if current is not None:
        current.set_attributes(attributes)


def failed(current: Any, exc: BaseException | str) -> None:
    """Mark a span as failed, with the error's class only."""
    if current is None:
        return
    from opentelemetry.trace import Status, StatusCode

    name = exc if isinstance(exc, str) else type(exc).__name__
    current.set_attribute("error.type", name)
    current.set_status(Status(StatusCode.ERROR, name))


def traceparent() -> str | None:
    """The current span as a W3C ``traceparent`` (what is stored to continue it), if any."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def trace_id_of(stored: str | None) -> str | None:
    """The trace id in a stored ``traceparent``."""
    if not stored or len(stored) < 55:
        return None
    return stored[3:35]


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current trace's headers (``OTEL_PROPAGATORS``: traceparent, baggage)."""
    if _tracer is None:
        return
    from opentelemetry import propagate

    propagate.inject(headers)


def current_ids() -> tuple[str, str] | None:
    """(trace_id, span_id) of the current span, for a log line; None without one."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def _span_context_of(stored: str) -> Any:
    from opentelemetry.trace import get_current_span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    ctx = TraceContextTextMapPropagator().extract({"traceparent": stored})
    span_context = get_current_span(ctx).get_span_context()
    return span_context if span_context.is_valid else None


def _context_of(stored: str) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": stored})


def instrument_flask(app: Any) -> None:
    """The Flask instrumentation's server spans (continuing the sender's traceparent)."""
    if _tracer is None:
        return
    from opentelemetry.instrumentation.flask import FlaskInstrumentor

    FlaskInstrumentor.instrument_app(  # type: ignore[no-untyped-call]
        app,
        tracer_provider=_provider,
        request_hook=_no_query,
        response_hook=_no_query,
        enable_commenter=False,
    )


def _no_query(current: Any, *_: Any) -> None:
    """A request's URL without its query string, which some senders sign or put a token in
    (the request and the response hook: the instrumentation sets them at both)."""
    if current is None or not current.is_recording():
        return
    attributes = getattr(current, "attributes", None) or {}
    for name in ("http.target", "http.url", "url.full"):
        value = attributes.get(name)
        if isinstance(value, str) and "?" in value:
            current.set_attribute(name, value.split("?", 1)[0])
    if attributes.get("url.query"):
        current.set_attribute("url.query", "")


def _instrument_libraries(provider: Any) -> None:
    """The SQLAlchemy instrumentation's client spans (db.*) for every engine made from now
    on (``inbox.store.engine.make_engine`` calls ``sqlalchemy.create_engine`` by name)."""
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    # SQLAlchemy 2.1 is past the range the package declares; its event API is unchanged.
    SQLAlchemyInstrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
