"""Console sessions across real web processes, with no INBOX_SECRET_KEY configured."""

from __future__ import annotations

import re
from http.cookies import SimpleCookie
from urllib.parse import urlencode

import pytest

from inbox.store.write import tokens as tstore
from tests.procs import Web

pytestmark = pytest.mark.e2e

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def cookies_of(headers: list[tuple[str, str]]) -> dict[str, str]:
    jar: dict[str, str] = {}
    for name, value in headers:
        if name.lower() == "set-cookie":
            parsed = SimpleCookie()
            parsed.load(value)
            jar.update({k: m.value for k, m in parsed.items()})
    return jar


def request(server: Web, method: str, path: str, jar: dict[str, str], form=None):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in jar.items() if v)}
    body = None
    if form is not None:
        body = urlencode(form)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.getheaders(), resp.read().decode()
    finally:
        conn.close()


def test_a_session_holds_across_web_processes_and_sign_out_ends_it_in_all(database_url, engine):
    with engine.begin() as conn:
        _, secret = tstore.create_token(conn, "e2e-op", "operator")
    server = Web({"DATABASE_URL": database_url, "INBOX_SECRET_KEY": None}, workers=2)
    try:
        jar: dict[str, str] = {}
        status, headers, page = request(server, "GET", "/ui/login", jar)
        jar.update(cookies_of(headers))
        csrf = CSRF.search(page).group(1)
        status, headers, _ = request(
            server, "POST", "/ui/login", jar, {"token": secret, "csrf": csrf}
        )
        assert status == 302
        jar.update(cookies_of(headers))
        # Each request on a new connection: the two processes share the load.
        statuses = [request(server, "GET", "/ui/events", jar)[0] for _ in range(20)]
        assert statuses == [200] * 20
        page = request(server, "GET", "/ui/events", jar)[2]
        stolen = dict(jar)
        status, _, _ = request(
            server, "POST", "/ui/logout", jar, {"csrf": CSRF.search(page).group(1)}
        )
        assert status == 302
        statuses = [request(server, "GET", "/ui/events", stolen)[0] for _ in range(10)]
        assert statuses == [302] * 10
    finally:
        server.stop()
