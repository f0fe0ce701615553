"""Helpers for the console tests: tokens, sign-in, CSRF-carrying posts, a two-tenant world."""

from __future__ import annotations

import re
from typing import Any

from flask.testing import FlaskClient
from sqlalchemy import text

from inbox.store.write import tokens as tstore
from tests.integration.test_api import quarantine

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def new_token(engine, name: str, role: str, tenant: str | None = None) -> str:
    with engine.begin() as conn:
        _, secret = tstore.create_token(conn, name, role, tenant)
    return secret


def grab(pattern: str | re.Pattern[str], html: str) -> str:
    match = re.search(pattern, html)
    assert match, f"{pattern} is not on the page"
    return match.group(1)


def csrf_of(client: FlaskClient, path: str = "/ui/login") -> str:
    resp = client.get(path)
    assert resp.status_code == 200, (path, resp.status_code)
    return grab(CSRF, resp.get_data(as_text=True))


def sign_in(client: FlaskClient, secret: str) -> None:
    resp = client.post("/ui/login", data={"token": secret, "csrf": csrf_of(client)})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    assert resp.headers["Location"].endswith("/ui/dashboard")


def post(client: FlaskClient, path: str, form_page: str, **data: str) -> Any:
    """POST a form the way a browser does: with the CSRF token of the page it came from."""
    return client.post(path, data={"csrf": csrf_of(client, form_page), **data})


def redirected_to_login(resp: Any) -> bool:
    return resp.status_code == 302 and "/ui/login" in resp.headers["Location"]


def make_world(engine, make_source) -> dict[str, Any]:
    a, b = make_source(tenant="ta", name="billing"), make_source(tenant="tb", name="billing")
    return {
        "a": a,
        "b": b,
        "a_events": quarantine(engine, a, 3, "evt_a"),
        "b_events": quarantine(engine, b, 2, "evt_b"),
        "op": new_token(engine, "alice-oncall", "operator"),
        "viewer": new_token(engine, "watcher", "viewer"),
        "op_a": new_token(engine, "ops-a", "operator", "ta"),
    }


def bulk_jobs(engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM bulk_replays")).scalar_one())
