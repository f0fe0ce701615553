"""Console sessions on the server (revocable, expiring, Secure when asked) and throttled
failures of sign-in and bearer tokens."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import text

from tests.integration.test_ui import csrf_of, new_token, redirected_to_login, sign_in
from web import create_app


def cookie_header(app, client) -> str:
    cookie = client.get_cookie(app.config["SESSION_COOKIE_NAME"])
    assert cookie is not None
    return f"{cookie.key}={cookie.value}"


def with_cookie(app, stolen: str):
    """A fresh client (another browser) holding a copy of the cookie."""
    other = app.test_client()
    name, _, value = stolen.partition("=")
    other.set_cookie(name, value)
    return other


def test_sign_out_ends_the_session_for_every_copy_of_the_cookie(
    app, client, settings, engine, bell
):
    sign_in(client, new_token(engine, "op", "operator"))
    stolen = cookie_header(app, client)
    other_process = create_app(settings, engine=engine, doorbell=bell)
    assert with_cookie(other_process, stolen).get("/ui/events").status_code == 200
    signed_out = client.post("/ui/logout", data={"csrf": csrf_of(client, "/ui/events")})
    assert signed_out.status_code == 302
    assert redirected_to_login(with_cookie(other_process, stolen).get("/ui/events"))
    assert redirected_to_login(with_cookie(app, stolen).get("/ui/events"))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM console_sessions")).scalar_one() == 0


def test_each_sign_in_gets_a_new_id(app, client, engine):
    secret = new_token(engine, "op", "operator")
    sign_in(client, secret)
    first = cookie_header(app, client)
    sign_in(client, secret)
    assert cookie_header(app, client) != first


@pytest.mark.parametrize(
    "aged",
    [
        "last_seen_at = now() - interval '31 minutes'",  # idle
        "created_at = now() - interval '13 hours'",  # absolute, though just used
    ],
)
def test_sessions_expire_idle_and_absolute(client, engine, aged):
    sign_in(client, new_token(engine, "op", "operator"))
    assert client.get("/ui/events").status_code == 200
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE console_sessions SET {aged}"))
    assert redirected_to_login(client.get("/ui/events"))


def test_a_session_in_use_is_touched_at_most_once_a_minute(client, engine):
    sign_in(client, new_token(engine, "op", "operator"))
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE console_sessions SET last_seen_at = now() - interval '29 minutes'")
        )
    assert client.get("/ui/events").status_code == 200  # touched: 29 minutes idle no more
    with engine.connect() as conn:
        idle = conn.execute(
            text("SELECT extract(epoch FROM now() - last_seen_at) FROM console_sessions")
        ).scalar_one()
    assert float(idle) < 60


@pytest.mark.parametrize(
    ("public_url", "cookie_secure", "secure"),
    [
        ("", None, False),
        ("http://inbox.example", None, False),
        ("https://inbox.example", None, True),
        ("https://inbox.example", False, False),
        ("", True, True),
    ],
)
def test_the_cookie_is_secure_when_configured_or_https(
    settings, engine, bell, public_url, cookie_secure, secure
):
    app = create_app(
        replace(settings, public_url=public_url, cookie_secure=cookie_secure),
        engine=engine,
        doorbell=bell,
    )
    client = app.test_client()
    login_page = client.get("/ui/login")
    sign_in(client, new_token(engine, f"op{public_url}{cookie_secure}", "operator"))
    set_cookie = [
        v for v in client.post("/ui/logout").headers.getlist("Set-Cookie")
    ] + login_page.headers.getlist("Set-Cookie")
    assert set_cookie
    for header in set_cookie:
        assert ("Secure" in header) == secure, header
        assert header.startswith("__Host-") == secure, header
        assert "HttpOnly" in header


def test_failed_sign_ins_are_throttled_per_address(client, engine, app):
    good = new_token(engine, "op", "operator")
    for _ in range(10):
        resp = client.post("/ui/login", data={"token": "inb_guess", "csrf": csrf_of(client)})
        assert resp.status_code == 401
    resp = client.post("/ui/login", data={"token": good, "csrf": csrf_of(client)})
    assert resp.status_code == 429  # even the right token: a guesser learns nothing
    assert 0 < int(resp.headers["Retry-After"]) <= 300
    elsewhere = app.test_client()
    elsewhere.environ_base["REMOTE_ADDR"] = "10.9.8.7"
    sign_in(elsewhere, good)  # another address is not held back
    assert elsewhere.get("/ui/events").status_code == 200
    with engine.begin() as conn:  # the window passes
        conn.execute(text("UPDATE auth_failures SET window_started = now() - interval '301 s'"))
    resp = client.post("/ui/login", data={"token": good, "csrf": csrf_of(client)})
    assert resp.status_code == 302


def test_failed_bearer_tokens_are_throttled_per_address(client, engine, app):
    good = {"Authorization": f"Bearer {new_token(engine, 'api', 'viewer')}"}
    bad = {"Authorization": "Bearer inb_" + "x" * 43}
    for _ in range(10):
        assert client.get("/api/v1/events", headers=bad).status_code == 401
    resp = client.get("/api/v1/events", headers=good)
    assert resp.status_code == 429 and resp.is_json
    assert resp.json["error"]["code"] == "too_many_requests"
    assert 0 < int(resp.headers["Retry-After"]) <= 300
    elsewhere = app.test_client()
    elsewhere.environ_base["REMOTE_ADDR"] = "10.9.8.7"
    assert elsewhere.get("/api/v1/events", headers=good).status_code == 200
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT kind, client, failures FROM auth_failures")).all()
    assert [tuple(r) for r in rows] == [("bearer", "127.0.0.1", 10)]


def test_behind_a_trusted_proxy_the_clients_address_is_counted(settings, engine, bell):
    app = create_app(replace(settings, trusted_proxies=1), engine=engine, doorbell=bell)
    client = app.test_client()
    bad = {"Authorization": "Bearer inb_" + "x" * 43, "X-Forwarded-For": "203.0.113.9"}
    assert client.get("/api/v1/events", headers=bad).status_code == 401
    with engine.connect() as conn:
        clients = conn.execute(text("SELECT client FROM auth_failures")).scalars().all()
    assert clients == ["203.0.113.9"]


def test_the_failure_count_is_shared_by_every_web_process(settings, engine, bell):
    """Guesses spread over two processes (two apps on one database) meet one limit."""
    a, b = (create_app(settings, engine=engine, doorbell=bell).test_client() for _ in range(2))
    bad = {"Authorization": "Bearer inb_" + "x" * 43}
    for i in range(10):
        assert (a if i % 2 else b).get("/api/v1/events", headers=bad).status_code == 401
    assert a.get("/api/v1/events", headers=bad).status_code == 429
    assert b.get("/api/v1/events", headers=bad).status_code == 429
