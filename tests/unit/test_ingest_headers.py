"""The receiver reads headers from the WSGI environ itself; they must be werkzeug's."""

from __future__ import annotations

from flask import Flask, request
from werkzeug.test import EnvironBuilder

from web.ingest import _headers


def test_the_environ_headers_are_werkzeugs_headers_lower_cased() -> None:
    app = Flask(__name__)
    builder = EnvironBuilder(
        method="POST",
        path="/hooks/t/s",
        data=b'{"id": 1}',
        content_type="application/json; charset=utf-8",
        headers=[
            ("X-Signature", "abc"),
            ("Idempotency-Key", "k-1"),
            ("Webhook-Id", "msg_1"),
            ("X-Weird_Name", "v"),
            ("Prefer", "wait=2"),
        ],
    )
    environ = builder.get_environ()
    environ["PATH"] = "/usr/bin"  # a process variable a server may copy in: not a header
    environ["HTTPS"] = "on"
    with app.request_context(environ):
        expected = {name.lower(): value for name, value in request.headers.items()}
        assert _headers() == expected
        assert _headers()["content-length"] == "9"
        assert "path" not in _headers() and "https" not in _headers()


def test_no_body_no_content_headers() -> None:
    app = Flask(__name__)
    with app.test_request_context("/hooks/t/s", method="GET", headers={"X-A": "1"}):
        expected = {name.lower(): value for name, value in request.headers.items()}
        assert _headers() == expected == {"x-a": "1", "host": "localhost"}
