"""The operator console (/ui): sign-in, CSRF, roles, tenant scoping, replays, pages."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from inbox.domain import tokens as tokenfmt
from inbox.infra.config import Settings
from inbox.services.bulk import run_bulk_once
from inbox.services.runtime import Runtime
from inbox.store.reads import tokens as treads
from inbox.store.write import tokens as tstore
from tests.integration.test_api import audit_count, quarantine, state_of
from tests.integration.ui_support import (
    CSRF,
    bulk_jobs,
    csrf_of,
    grab,
    make_world,
    new_token,
    post,
    redirected_to_login,
    sign_in,
)


@pytest.fixture
def world(engine, make_source) -> dict[str, Any]:
    return make_world(engine, make_source)


# --- signing in --------------------------------------------------------------------


def test_every_page_needs_a_sign_in_and_nothing_changes_without_one(client, engine, world):
    evt = world["a_events"][0]
    for path in ("/ui/dashboard", "/ui/events", f"/ui/events/{evt}", f"/ui/events/{evt}/replay"):
        resp = client.get(path)
        assert redirected_to_login(resp), path
        assert "next=" in resp.headers["Location"]
    csrf = csrf_of(client)  # a session with a CSRF token, but nobody signed in
    resp = client.post(f"/ui/events/{evt}/replay", data={"csrf": csrf})
    assert redirected_to_login(resp)
    resp = client.post("/ui/replays", data={"csrf": csrf, "rate": "5"})
    assert redirected_to_login(resp)
    assert client.get("/ui/replays/rpl_x/progress").status_code == 401
    assert state_of(engine, evt) == "quarantined" and audit_count(engine) == 0
    assert bulk_jobs(engine) == 0


def test_sign_in_returns_to_the_page_asked_for_and_sign_out_ends_it(client, world):
    resp = client.get("/ui/events?state=quarantined")
    login = resp.headers["Location"]
    page = client.get(login)
    csrf = grab(CSRF, page.get_data(as_text=True))
    assert 'name="next" value="/ui/events?state=quarantined"' in page.get_data(as_text=True)
    resp = client.post(
        "/ui/login",
        data={"token": world["op"], "csrf": csrf, "next": "/ui/events?state=quarantined"},
    )
    assert resp.headers["Location"].endswith("/ui/events?state=quarantined")
    assert client.get("/ui/events").status_code == 200
    # Somewhere else entirely is not a place to return to.
    client.post("/ui/logout", data={"csrf": csrf_of(client, "/ui/events")})
    resp = client.post(
        "/ui/login",
        data={"token": world["op"], "csrf": csrf_of(client), "next": "https://evil.example/"},
    )
    assert resp.headers["Location"].endswith("/ui/dashboard")
    assert post(client, "/ui/logout", "/ui/events").status_code == 302
    assert redirected_to_login(client.get("/ui/events"))


@pytest.mark.parametrize("bad", ["", "inb_" + "x" * 43, "not-a-token", "revoked"])
def test_a_bad_token_is_refused(client, engine, world, bad):
    if bad == "revoked":
        bad = new_token(engine, "old", "operator")
        with engine.begin() as conn:
            assert tstore.revoke(conn, "old")
    resp = client.post("/ui/login", data={"token": bad, "csrf": csrf_of(client)})
    assert resp.status_code == 401
    assert "unknown or revoked" in resp.get_data(as_text=True)
    assert redirected_to_login(client.get("/ui/events"))


def test_revoking_a_token_ends_its_sessions_at_once(client, engine, world):
    sign_in(client, world["op"])
    assert client.get("/ui/events").status_code == 200
    with engine.begin() as conn:
        assert tstore.revoke(conn, "alice-oncall")
    assert redirected_to_login(client.get("/ui/events"))


def test_the_cookie_holds_a_random_id_never_the_token(app, client, engine, world):
    """The session is on the server: the cookie is an opaque id, the table its digest."""
    import hashlib

    sign_in(client, world["op"])
    cookie = client.get_cookie(app.config["SESSION_COOKIE_NAME"])
    assert cookie is not None and cookie.http_only
    secret = world["op"]
    assert secret not in cookie.value and secret[4:20] not in cookie.value
    with engine.connect() as conn:
        (token,) = [t for t in treads.list_tokens(conn) if t.name == "alice-oncall"]
        rows = conn.execute(text("SELECT sid_digest, token_id, data FROM console_sessions")).all()
    [(sid_digest, token_id, data)] = rows
    assert bytes(sid_digest) == hashlib.sha256(cookie.value.encode()).digest()
    assert token_id == token.id
    flat = repr(data) + cookie.value
    assert secret not in flat and tokenfmt.digest(secret).hex() not in flat


# --- CSRF and roles ------------------------------------------------------------------


def test_a_post_without_the_csrf_token_is_400_and_changes_nothing(client, engine, world):
    evt = world["a_events"][0]
    sign_in(client, world["op"])
    assert client.post(f"/ui/events/{evt}/replay").status_code == 400
    resp = client.post(f"/ui/events/{evt}/replay", data={"csrf": "forged"})
    assert resp.status_code == 400
    resp = client.post("/ui/replays", data={"rate": "5"})
    assert resp.status_code == 400
    assert client.post("/ui/logout").status_code == 400
    assert client.post("/ui/login", data={"token": world["op"]}).status_code == 400
    assert state_of(engine, evt) == "quarantined" and audit_count(engine) == 0
    assert bulk_jobs(engine) == 0
    # ...and with it, the same replay goes through.
    assert post(client, f"/ui/events/{evt}/replay", f"/ui/events/{evt}").status_code == 302
    assert state_of(engine, evt) == "received"


def test_a_viewer_sees_no_replay_button_and_its_posts_are_403(client, engine, world):
    evt = world["a_events"][0]
    sign_in(client, world["viewer"])
    page = client.get(f"/ui/events/{evt}").get_data(as_text=True)
    assert "quarantined" in page and 'id="replay"' not in page
    assert "Replay every quarantined" not in client.get("/ui/events").get_data(as_text=True)
    assert client.get(f"/ui/events/{evt}/replay").status_code == 403
    assert client.get("/ui/replays/new").status_code == 403
    resp = post(client, f"/ui/events/{evt}/replay", f"/ui/events/{evt}")
    assert resp.status_code == 403
    resp = post(client, "/ui/replays", "/ui/events", rate="5", key="k1")
    assert resp.status_code == 403
    assert state_of(engine, evt) == "quarantined" and audit_count(engine) == 0
    assert bulk_jobs(engine) == 0
    # The operator's page has the button.
    client.post("/ui/logout", data={"csrf": csrf_of(client, "/ui/events")})
    sign_in(client, world["op"])
    assert 'id="replay"' in client.get(f"/ui/events/{evt}").get_data(as_text=True)


def test_a_tenant_token_sees_only_its_tenant(client, engine, world):
    sign_in(client, world["op_a"])
    theirs = world["b_events"][0]
    assert client.get(f"/ui/events/{theirs}").status_code == 404
    assert client.get(f"/ui/events/{theirs}/replay").status_code == 404
    resp = post(client, f"/ui/events/{theirs}/replay", "/ui/events")
    assert resp.status_code == 404
    assert state_of(engine, theirs) == "quarantined" and audit_count(engine) == 0
    listed = set(re.findall(r"evt_[ab]\d+", client.get("/ui/events").get_data(as_text=True)))
    assert listed == set(world["a_events"])
    listed = client.get("/ui/events?tenant=tb").get_data(as_text=True)
    assert "evt_b" not in listed and "No events match" in listed
    # A bulk replay made with this token only holds its tenant's events.
    resp = post(client, "/ui/replays", "/ui/replays/new", rate="1000", key="scoped")
    job = resp.headers["Location"].rsplit("/", 1)[1]
    progress = client.get(f"/ui/replays/{job}/progress").json
    assert progress["total"] == 3
    with engine.connect() as conn:
        items = conn.execute(
            text("SELECT public_id FROM bulk_replay_items ORDER BY public_id")
        ).scalars()
        assert list(items) == sorted(world["a_events"])


# --- replays ---------------------------------------------------------------------------


def test_replay_asks_first_then_moves_the_event_and_audits_the_tokens_name(
    client, engine, world, bell
):
    evt = world["a_events"][0]
    sign_in(client, world["op"])
    confirm = client.get(f"/ui/events/{evt}/replay")
    assert confirm.status_code == 200
    html = confirm.get_data(as_text=True)
    assert "Replay this event?" in html and f'action="/ui/events/{evt}/replay"' in html
    assert state_of(engine, evt) == "quarantined"  # asking changes nothing
    resp = client.post(f"/ui/events/{evt}/replay", data={"csrf": grab(CSRF, html)})
    assert resp.status_code == 302 and resp.headers["Location"].endswith(f"/ui/events/{evt}")
    assert state_of(engine, evt) == "received" and bell.rings == 1
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT actor, action FROM audit_log")).all()
    assert [(r.actor, r.action) for r in rows] == [("alice-oncall", "replay")]
    page = client.get(f"/ui/events/{evt}").get_data(as_text=True)
    assert "Replay 1 by alice-oncall" in page and "replayed: it is back in the inbox" in page
    # A second replay finds it no longer quarantined: 409, nothing more in the audit log.
    again = post(client, f"/ui/events/{evt}/replay", f"/ui/events/{evt}")
    assert again.status_code == 409 and audit_count(engine) == 1


def test_delivery_replay_is_confirmed_and_audited(client, engine, world):
    a = world["a"]
    with engine.begin() as conn:
        ep = conn.execute(
            text(
                "INSERT INTO endpoints (public_id, tenant_id, url) VALUES"
                " ('ep_1', :t, 'https://hooks.example/in') RETURNING id"
            ),
            {"t": a.tenant_id},
        ).scalar_one()
        ev = conn.execute(
            text("SELECT id FROM events WHERE public_id = :p"), {"p": world["a_events"][0]}
        ).scalar_one()
        d = conn.execute(
            text(
                "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type,"
                " body, state, attempts, last_error) VALUES ('msg_1', :t, :e, :ev, 'sim.done',"
                " '{}', 'failed', 4, 'HTTP 500') RETURNING id"
            ),
            {"t": a.tenant_id, "e": ep, "ev": ev},
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO delivery_attempts (delivery_id, status, latency_ms, excerpt)"
                " VALUES (:d, 500, 12, 'upstream down')"
            ),
            {"d": d},
        )
    evt = world["a_events"][0]
    sign_in(client, world["op"])
    page = client.get(f"/ui/events/{evt}").get_data(as_text=True)
    assert "msg_1" in page and "HTTP 500" in page and "upstream down" in page
    confirm = client.get(f"/ui/deliveries/msg_1/replay?event={evt}")
    assert confirm.status_code == 200 and "same webhook-id" in confirm.get_data(as_text=True)
    resp = post(client, "/ui/deliveries/msg_1/replay", "/ui/events", event=evt)
    assert resp.status_code == 302 and resp.headers["Location"].endswith(f"/ui/events/{evt}")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT state FROM deliveries")).scalar_one() == "pending"
        rows = conn.execute(text("SELECT actor, subject_kind FROM audit_log")).all()
    assert [(r.actor, r.subject_kind) for r in rows] == [("alice-oncall", "delivery")]
    assert post(client, "/ui/deliveries/msg_1/replay", "/ui/events").status_code == 409


def test_bulk_replay_by_filter_with_progress(client, engine, world, make_source):
    other = make_source(tenant="ta", name="shop")
    quarantine(engine, other, 4, "evt_s")
    sign_in(client, world["op"])
    confirm = client.get("/ui/replays/new?tenant=ta&source=billing")
    html = confirm.get_data(as_text=True)
    assert confirm.status_code == 200 and "<strong>3</strong>" in html
    key = grab(r'name="key" value="([^"]+)"', html)
    form = {"csrf": grab(CSRF, html), "tenant": "ta", "source": "billing"}
    resp = client.post("/ui/replays", data={**form, "rate": "1000", "key": key})
    assert resp.status_code == 302
    job = resp.headers["Location"].rsplit("/", 1)[1]
    # The same form sent twice makes one job.
    again = client.post("/ui/replays", data={**form, "rate": "1000", "key": key})
    assert again.headers["Location"] == resp.headers["Location"] and bulk_jobs(engine) == 1
    page = client.get(f"/ui/replays/{job}").get_data(as_text=True)
    assert 'data-progress-url="/ui/replays/' in page and "<progress" in page
    before = client.get(f"/ui/replays/{job}/progress").json
    assert before["status"] == "queued" and before["total"] == 3 and before["percent"] == 0
    with engine.connect() as conn:
        job_id = conn.execute(
            text("SELECT id FROM bulk_replays WHERE public_id = :p"), {"p": job}
        ).scalar_one()
    assert run_bulk_once(Runtime(Settings(), engine), job_id).moved == 3
    after = client.get(f"/ui/replays/{job}/progress").json
    assert after["status"] == "completed" and after["percent"] == 100 and after["moved"] == 3
    assert after["actor"] == "alice-oncall"
    assert [state_of(engine, e) for e in world["a_events"]] == ["received"] * 3
    assert state_of(engine, "evt_s1") == "quarantined"  # another source: not in the filter
    assert state_of(engine, world["b_events"][0]) == "quarantined"
    bad = post(client, "/ui/replays", "/ui/events", rate="0")
    assert bad.status_code == 400 and bulk_jobs(engine) == 1


# --- pages ---------------------------------------------------------------------------


def test_the_event_list_filters_and_pages_by_cursor(client, engine, world, make_source):
    shop = make_source(tenant="ta", name="shop")
    quarantine(engine, shop, 120, "evt_p")
    sign_in(client, world["op"])
    seen: list[str] = []
    url: str | None = "/ui/events?source=shop&state=quarantined"
    pages = 0
    while url:
        html = client.get(url).get_data(as_text=True)
        seen += re.findall(r'class="mono">(evt_\w+)</a>', html)
        match = re.search(r'<a href="([^"]+)" rel="next">', html)
        url = match.group(1).replace("&amp;", "&") if match else None
        pages += 1
    assert pages == 3 and len(seen) == 120 and set(seen) == {f"evt_p{i}" for i in range(1, 121)}
    assert seen == sorted(seen, key=lambda s: -int(s[5:]))  # newest first, no repeats
    html = client.get("/ui/events?state=completed").get_data(as_text=True)
    assert "No events match" in html
    assert client.get("/ui/events?state=bogus").status_code == 400
    assert client.get("/ui/events?since=yesterday").status_code == 400
    future = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert "No events match" in client.get(f"/ui/events?since={future}").get_data(as_text=True)


def test_the_event_page_shows_its_whole_story_escaped(client, engine, world):
    a = world["a"]
    with engine.begin() as conn:
        ev = conn.execute(
            text(
                "INSERT INTO events (public_id, tenant_id, source_id, content_type, body,"
                " body_sha256, response_status, response_body, state, event_type, headers,"
                " duplicate_count, first_duplicate_at, last_duplicate_at, attempts,"
                " last_error_class, last_error_message, finished_at)"
                " VALUES ('evt_story', :t, :s, 'application/json', :body, '\\x00', 202, '',"
                " 'quarantined', 'sim.swap', '{\"user-agent\": \"Stripe/1.0\"}', 4,"
                " now() - interval '9 minutes', now() - interval '2 minutes', 5,"
                " 'RuntimeError', 'notify is down', now()) RETURNING id"
            ),
            {"t": a.tenant_id, "s": a.id, "body": b'{"note":"<script>alert(1)</script>"}'},
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO steps (event_id, name, result, attempt) VALUES"
                " (:e, 'charge', '{\"charged\": true}', 1)"
            ),
            {"e": ev},
        )
        conn.execute(
            text(
                "INSERT INTO idempotency_conflicts (event_id, other_body_sha256, count)"
                " VALUES (:e, '\\xabcdef', 2)"
            ),
            {"e": ev},
        )
    sign_in(client, world["op"])
    resp = client.get("/ui/events/evt_story")
    html = resp.get_data(as_text=True)
    assert resp.status_code == 200
    for needle in (
        "Received",
        "First duplicate",
        "4 duplicates",
        "Last duplicate",
        "Conflict",
        "abcdef",
        "Step charge completed",
        "&#34;charged&#34;: true",
        "RuntimeError: notify is down",
        "after 5 attempts",
        "Stripe/1.0",
    ):
        assert needle in html, needle
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the raw body, escaped
    policy = resp.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "script-src 'self'" in policy
    # Nothing is loaded from anywhere else.
    assert not re.search(r'(src|href)="(https?:)?//', html)
