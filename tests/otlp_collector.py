"""A small OTLP/HTTP collector for tests: decodes each export (protobuf) and keeps its spans."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class Link:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Span:
    service: str
    process: str
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int  # opentelemetry.proto.trace.v1.Span.SpanKind: 2 server, 3 client, 5 consumer
    attributes: dict[str, Any]
    links: tuple[Link, ...]
    status_code: int  # 2: error


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)


def _attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


class Collector:
    """POST /v1/traces on a free port; ``spans`` holds every span received."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                ok = self.path == "/v1/traces" and (
                    self.headers.get("content-type") == "application/x-protobuf"
                )
                if ok:
                    collector._receive(raw)
                answer = ExportTraceServiceResponse().SerializeToString() if ok else b""
                self.send_response(200 if ok else 400)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _receive(self, raw: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(raw)
        got: list[Span] = []
        for rs in request.resource_spans:
            resource = _attributes(rs.resource.attributes)
            for scope in rs.scope_spans:
                for s in scope.spans:
                    got.append(
                        Span(
                            service=str(resource.get("service.name")),
                            process=str(resource.get("inbox.process")),
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            name=s.name,
                            kind=s.kind,
                            attributes=_attributes(s.attributes),
                            links=tuple(
                                Link(
                                    link.trace_id.hex(),
                                    link.span_id.hex(),
                                    _attributes(link.attributes),
                                )
                                for link in s.links
                            ),
                            status_code=s.status.code,
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans += got

    def snapshot(self) -> list[Span]:
        with self._lock:
            return list(self.spans)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
