"""The app's responses (``web.responses.BufferedResponse``): a body in memory goes to the
server as one bytes object in a list, with werkzeug's headers and its empty-body rule; a
streamed body is passed through as an iterator, never read ahead."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from werkzeug.test import EnvironBuilder

from web.responses import BufferedResponse


def call(resp: BufferedResponse, method: str = "GET") -> tuple[Any, str, dict[str, str]]:
    seen: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        seen.append((status, headers))
        return lambda data: None

    body = resp(EnvironBuilder(method=method).get_environ(), start_response)
    [(status, headers)] = seen
    return body, status, dict(headers)


def test_a_body_in_memory_is_one_bytes_object_in_a_list() -> None:
    closed: list[bool] = []
    resp = BufferedResponse([b'{"id":', b'"evt_1"}'], status=202, content_type="application/json")
    resp.call_on_close(lambda: closed.append(True))
    body, status, headers = call(resp)
    assert body == [b'{"id":"evt_1"}'] and type(body) is list
    assert status == "202 ACCEPTED"
    assert headers["Content-Type"] == "application/json"
    assert closed == [True]  # closed as the closing iterator would have closed it


@pytest.mark.parametrize(("method", "status"), [("HEAD", 200), ("GET", 204), ("GET", 304)])
def test_no_body_where_http_has_none(method: str, status: int) -> None:
    body, line, _ = call(BufferedResponse(b"hello", status=status), method)
    assert b"".join(body) == b""
    assert line.startswith(str(status))


def test_a_streamed_body_passes_through_unread() -> None:
    pulled: list[int] = []

    def stream() -> Iterator[bytes]:
        for i in range(3):
            pulled.append(i)
            yield b"chunk"

    body, _, _ = call(BufferedResponse(stream(), mimetype="text/plain"))
    assert not isinstance(body, list)
    assert pulled == []  # nothing was read before the server asks
    assert b"".join(body) == b"chunkchunkchunk"
