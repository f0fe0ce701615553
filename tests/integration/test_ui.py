"""The operator console (/ui): sign-in, CSRF, roles, tenant scoping, replays, dashboard."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from inbox.domain import tokens as tokenfmt
from inbox.services.bulk import run_bulk_once
from inbox.store import dashboard
from inbox.store import tokens as tstore
from tests.integration.test_api import audit_count, quarantine, state_of

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


@pytest.fixture
def world(engine, make_source) -> dict[str, Any]:
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


def test_the_cookie_holds_the_tokens_id_never_the_token(app, client, engine, world):
    sign_in(client, world["op"])
    cookie = client.get_cookie(app.config["SESSION_COOKIE_NAME"])
    assert cookie is not None and cookie.http_only
    secret = world["op"]
    assert secret not in cookie.value and secret[4:20] not in cookie.value
    data = app.session_interface.get_signing_serializer(app).loads(cookie.value)
    with engine.connect() as conn:
        (token,) = [t for t in tstore.list_tokens(conn) if t.name == "alice-oncall"]
    assert data["tid"] == token.id
    flat = repr(data)
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
    assert run_bulk_once(engine, job_id).moved == 3
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


# --- dashboard ---------------------------------------------------------------------------


def insert_event(conn, src, public_id: str, received: datetime, **cols: Any) -> int:
    values = {
        "state": "received",
        "finished_at": None,
        "duplicate_count": 0,
        "first_duplicate_at": None,
        "last_duplicate_at": None,
        **cols,
    }
    return int(
        conn.execute(
            text(
                "INSERT INTO events (public_id, tenant_id, source_id, content_type, body,"
                " body_sha256, response_status, response_body, received_at, state, finished_at,"
                " duplicate_count, first_duplicate_at, last_duplicate_at)"
                " VALUES (:p, :t, :s, 'application/json', '{}', '\\x00', 202, '', :r, :state,"
                " :finished_at, :duplicate_count, :first_duplicate_at, :last_duplicate_at)"
                " RETURNING id"
            ),
            {"p": public_id, "t": src.tenant_id, "s": src.id, "r": received, **values},
        ).scalar_one()
    )


def charts_of(html: str) -> dict[str, dict[str, Any]]:
    """Each chart's summary attribute and its per-bucket values, read from the SVG."""
    out: dict[str, dict[str, Any]] = {}
    for chunk in html.split("<svg ")[1:]:
        svg = chunk.split("</svg>")[0]
        name = grab(r'data-measure="(\w+)"', svg)
        summary = grab(r'data-(?:total|now)="([\d.]+)"', svg)
        values = {
            int(k): float(v) for k, v in re.findall(r'data-k="(\d+)" data-value="([\d.]+)"', svg)
        }
        out[name] = {"summary": float(summary), "values": values}
    return out


@pytest.fixture
def scripted(engine, world) -> dict[str, Any]:
    """A scripted hour for tenant ta (and noise from tb), at times relative to the minute."""
    a, b = world["a"], world["b"]
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM events"))
        now = conn.execute(text("SELECT now()")).scalar_one()
        minute = now.replace(second=0, microsecond=0)

        def at(minutes: int, seconds: int = 10) -> datetime:
            return minute - timedelta(minutes=minutes) + timedelta(seconds=seconds)

        for i in range(3):  # received 5 min ago, completed a minute later
            insert_event(conn, a, f"evt_c{i}", at(5), state="completed", finished_at=at(4))
        insert_event(conn, a, "evt_q", at(10), state="quarantined", finished_at=at(9))
        insert_event(conn, a, "evt_old", at(20))  # still waiting
        insert_event(conn, a, "evt_new", at(2))
        dup = insert_event(
            conn,
            a,
            "evt_dup",
            at(30),
            state="completed",
            finished_at=at(30, 20),
            duplicate_count=3,
            first_duplicate_at=at(5, 30),
            last_duplicate_at=at(3),
        )
        conn.execute(
            text(
                "INSERT INTO idempotency_conflicts (event_id, other_body_sha256, count,"
                " first_at, last_at) VALUES (:e, '\\x01', 2, :f, :l)"
            ),
            {"e": dup, "f": at(6), "l": at(1)},
        )
        insert_event(conn, a, "evt_3h", at(180), state="completed", finished_at=at(179))
        # received before the window, finished inside it
        insert_event(conn, a, "evt_slow", at(70), state="completed", finished_at=at(50))
        for i in range(5):  # another tenant's traffic
            insert_event(conn, b, f"evt_b{i}", at(5), state="completed", finished_at=at(5, 30))
        ep = conn.execute(
            text(
                "INSERT INTO endpoints (public_id, tenant_id, url) VALUES"
                " ('ep_d', :t, 'https://x.example/') RETURNING id"
            ),
            {"t": a.tenant_id},
        ).scalar_one()
        d = conn.execute(
            text(
                "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_type, body)"
                " VALUES ('msg_d', :t, :e, 'x', '{}') RETURNING id"
            ),
            {"t": a.tenant_id, "e": ep},
        ).scalar_one()
        for status, error in [
            (200, None),
            (204, None),
            (503, None),
            (404, None),
            (None, "timeout"),
        ]:
            conn.execute(
                text(
                    "INSERT INTO delivery_attempts (delivery_id, at, status, error_class,"
                    " latency_ms) VALUES (:d, :at, :s, :e, 5)"
                ),
                {"d": d, "at": at(7), "s": status, "e": error},
            )
    return {"at": at}


def expected_buckets(start: datetime, step: int, times: list[datetime]) -> dict[int, float]:
    out: dict[int, float] = {}
    for t in times:
        k = int((t - start).total_seconds() // step)
        out[k] = out.get(k, 0) + 1
    return out


def nonzero(values: dict[int, float]) -> dict[int, float]:
    return {k: v for k, v in values.items() if v}


def test_the_dashboard_draws_the_numbers_of_a_scripted_hour(client, engine, world, scripted):
    at = scripted["at"]
    sign_in(client, world["op_a"])
    html = client.get("/ui/dashboard").get_data(as_text=True)
    start = datetime.fromisoformat(grab(r'data-start="([^"]+)"', html))
    charts = charts_of(html)
    assert len(charts["accepted"]["values"]) == 60

    def bucket(*times: datetime) -> dict[int, float]:
        return expected_buckets(start, 60, list(times))

    accepted = [at(5)] * 3 + [at(10), at(20), at(2), at(30)]
    assert nonzero(charts["accepted"]["values"]) == bucket(*accepted)
    assert charts["accepted"]["summary"] == 7  # not the 3-hour-old one, nor tenant tb's five
    assert nonzero(charts["completed"]["values"]) == bucket(at(4), at(4), at(4), at(30), at(50))
    assert nonzero(charts["quarantined"]["values"]) == bucket(at(9))
    # Three duplicates: the first at its time, the other two at the last time.
    assert nonzero(charts["duplicates"]["values"]) == bucket(at(5, 30), at(3), at(3))
    assert nonzero(charts["conflicts"]["values"]) == bucket(at(6), at(1))
    assert charts["attempts"]["summary"] == 5
    assert nonzero(charts["attempts"]["values"]) == {bucket(at(7)).popitem()[0]: 5}
    assert 'data-value="5"><title>' in html and "2xx 2, 3xx/4xx 1, 5xx 1, no answer 1" in html
    # Depth, sampled at each bucket's end: evt_old from minute -20 on, evt_new from -2,
    # the three completed events across the end of minute -5, evt_q across -10's.
    depth = charts["depth"]["values"]
    k5, k10, k20, k2, k50 = (next(iter(bucket(at(m)))) for m in (5, 10, 20, 2, 50))
    # evt_slow waited from before the window until minute -50
    assert depth[0] == 1 and depth[k50 - 1] == 1 and depth[k50] == 0
    assert depth[k20 - 1] == 0 and depth[k20] == 1
    assert depth[k10] == 2 and depth[k5] == 4 and depth[k5 + 1] == 1
    assert depth[k2] == 2 and depth[59] == 2 and charts["depth"]["summary"] == 2
    oldest = charts["oldest_age_seconds"]["values"]
    assert oldest[k20 - 1] == 0
    assert oldest[k20] == pytest.approx(50, abs=1)  # sampled at the end of its minute
    with engine.connect() as conn:
        now = conn.execute(text("SELECT now()")).scalar_one()
    assert charts["oldest_age_seconds"]["summary"] == pytest.approx(
        (now - at(20)).total_seconds(), abs=5
    )
    assert '<span class="n" id="now-received">2</span>' in html

    day = charts_of(client.get("/ui/dashboard?window=day").get_data(as_text=True))
    assert len(day["accepted"]["values"]) == 24
    assert day["accepted"]["summary"] == 9 and day["completed"]["summary"] == 6


def test_an_all_tenants_token_sees_every_tenants_numbers(client, world, scripted):
    sign_in(client, world["op"])
    charts = charts_of(client.get("/ui/dashboard").get_data(as_text=True))
    assert charts["accepted"]["summary"] == 12 and charts["completed"]["summary"] == 10
    assert client.get("/ui/dashboard?window=week").status_code == 400


def test_the_last_bucket_agrees_with_the_metrics_queries(engine, world, scripted):
    """The chart's 'now' is what inbox.store.stats (the /metrics gauges) reports."""
    from inbox.store import stats

    with engine.connect() as conn:
        s = dashboard.series(conn, dashboard.WINDOWS["hour"], None)
        rows = stats.inbox_depth(conn)
    pending = [r for r in rows if r.state in stats.PENDING_STATES]
    assert s.values["depth"][-1] == sum(r.count for r in pending) == 2
    oldest = max(r.oldest_age_seconds for r in pending if r.count)
    assert s.values["oldest_age_seconds"][-1] == pytest.approx(oldest, abs=1)


def test_a_replayed_event_is_pending_from_its_replay(client, engine, world):
    """A quarantined event replayed later is not counted as waiting while it sat in quarantine."""
    sign_in(client, world["op"])
    evt = world["a_events"][0]
    with engine.begin() as conn:
        conn.execute(text("UPDATE events SET received_at = now() - interval '50 minutes'"))
    assert post(client, f"/ui/events/{evt}/replay", f"/ui/events/{evt}").status_code == 302
    with engine.connect() as conn:
        s = dashboard.series(conn, dashboard.WINDOWS["hour"], None)
    assert s.values["depth"][-1] == 1
    assert sum(1 for v in s.values["depth"] if v) == 1  # only now, not for the last 50 minutes
    assert s.values["oldest_age_seconds"][-1] == pytest.approx(50 * 60, abs=5)
