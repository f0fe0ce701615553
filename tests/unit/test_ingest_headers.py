"""The receiver's header reading (web.ingest._headers): werkzeug's headers, lower-cased,
the same on every request, while the environ keys that name no header are passed over."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from web import ingest

# What granian puts in every environ beside the request's own keys: the process
# environment, then its fixed WSGI keys.
PROCESS = {f"SERVICE_{i}_PORT": "tcp://10.0.0.1:80" for i in range(60)} | {"PATH": "/usr/bin"}
REQUEST = {
    "CONTENT_TYPE": "application/json",
    "CONTENT_LENGTH": "2",
    "HTTP_HOST": "example.test",
    "HTTP_X_SIGNATURE": "abc",
    "HTTP_IDEMPOTENCY_KEY": "k-1",
    "HTTP_CONTENT_TYPE": "ignored: werkzeug reads CONTENT_TYPE",
}


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "_NAMES", {})
    monkeypatch.setattr(ingest, "_NOT_HEADERS", set())


def _read(app: Flask, extra: dict[str, Any]) -> dict[str, str]:
    with app.test_request_context(
        "/hooks/t/s", method="POST", environ_base={**PROCESS, **REQUEST, **extra}
    ):
        return ingest._headers()


def _werkzeug(app: Flask, extra: dict[str, Any]) -> dict[str, str]:
    from flask import request

    with app.test_request_context(
        "/hooks/t/s", method="POST", environ_base={**PROCESS, **REQUEST, **extra}
    ):
        return {k.lower(): v for k, v in request.headers.items()}


def test_headers_are_werkzeugs_lower_cased_on_every_request() -> None:
    app = Flask(__name__)
    for n in range(3):  # the first request fills the caches; the others read through them
        extra = {"HTTP_X_REQUEST": str(n)}
        got = _read(app, extra)
        assert got == _werkzeug(app, extra)
        assert got["x-request"] == str(n)
        assert got["idempotency-key"] == "k-1"
        assert got["content-type"] == "application/json"


def test_keys_that_name_no_header_are_remembered_and_passed_over() -> None:
    app = Flask(__name__)
    _read(app, {})
    assert set(PROCESS) <= ingest._NOT_HEADERS
    assert ingest._NOT_HEADERS & set(REQUEST) == {"HTTP_CONTENT_TYPE"}
    assert "HTTP_HOST" in ingest._NAMES and "PATH" not in ingest._NAMES


def test_an_empty_content_type_is_no_header_and_a_new_header_is_read() -> None:
    app = Flask(__name__)
    _read(app, {})
    got = _read(app, {"CONTENT_TYPE": "", "HTTP_X_LATE": "yes"})
    assert "content-type" not in got
    assert got["x-late"] == "yes"


def test_the_caches_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "_MAX_NAMES", 5)
    app = Flask(__name__)
    got = _read(app, {f"HTTP_X_{i}": "v" for i in range(20)})
    assert len(ingest._NAMES) <= 5 and len(ingest._NOT_HEADERS) <= 5
    assert all(got[f"x-{i}"] == "v" for i in range(20))  # read all the same
