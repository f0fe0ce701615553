"""The console's operator pages: deliveries, endpoints, sources, dead letters, search,
the event's full failure history, and what a bulk replay achieved."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from sqlalchemy import text

import tests.sink_playbooks  # noqa: F401  (registers the test playbooks)
from inbox.infra.config import Settings
from inbox.services.bulk import run_bulk_once
from inbox.services.runtime import Runtime
from inbox.store.reads import endpoints as ereads
from inbox.store.write import endpoints as estore
from tests.integration.test_api import quarantine, state_of
from tests.integration.test_ui import CSRF, grab, new_token, post, sign_in
from tests.integration.test_workers import drain_all, send, wsettings  # noqa: F401

pytestmark = pytest.mark.usefixtures("sink_table")


def html(client, path: str) -> str:
    resp = client.get(path)
    assert resp.status_code == 200, (path, resp.status_code)
    return resp.get_data(as_text=True)


def endpoint(engine, tenant: str, url: str = "https://hooks.example/in", secret: str = "whsec_a"):
    with engine.begin() as conn:
        return estore.create_endpoint(conn, tenant, url, secret)


def delivery(engine, ep, public_id: str, state: str, attempts: list[tuple], event=None) -> int:
    """A delivery with its attempts, each (status, error_class, latency_ms, excerpt)."""
    with engine.begin() as conn:
        ev = None
        if event is not None:
            ev = conn.execute(
                text("SELECT id FROM events WHERE public_id = :p"), {"p": event}
            ).scalar_one()
        last = attempts[-1] if attempts else (None, None, 0, None)
        d = conn.execute(
            text(
                "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type,"
                " body, state, attempts, last_status, last_error, finished_at)"
                " VALUES (:p, :t, :e, :ev, 'order.paid', '{}', :s, :n, :ls, :le,"
                " CASE WHEN :s IN ('failed', 'delivered') THEN now() END) RETURNING id"
            ),
            {
                "p": public_id,
                "t": ep.tenant_id,
                "e": ep.id,
                "ev": ev,
                "s": state,
                "n": len(attempts),
                "ls": last[0],
                "le": f"HTTP {last[0]}" if last[0] else last[1],
            },
        ).scalar_one()
        for status, error_class, ms, excerpt in attempts:
            conn.execute(
                text(
                    "INSERT INTO delivery_attempts (delivery_id, status, error_class, latency_ms,"
                    " excerpt) VALUES (:d, :s, :c, :ms, :x)"
                ),
                {"d": d, "s": status, "c": error_class, "ms": ms, "x": excerpt},
            )
    return int(d)


@pytest.fixture
def world(engine, make_source) -> dict[str, Any]:
    a, b = make_source(tenant="ta", name="billing"), make_source(tenant="tb", name="shop")
    return {
        "a": a,
        "b": b,
        "op": new_token(engine, "alice-oncall", "operator"),
        "viewer": new_token(engine, "watcher", "viewer"),
        "op_a": new_token(engine, "ops-a", "operator", "ta"),
    }


# --- deliveries ------------------------------------------------------------------------


def test_the_deliveries_page_filters_and_each_attempt_shows_status_latency_and_excerpt(
    client, engine, world
):
    ep_a, ep_b = endpoint(engine, "ta"), endpoint(engine, "tb", "https://b.example/h")
    delivery(engine, ep_a, "msg_ok", "delivered", [(200, None, 31, "thanks")])
    delivery(
        engine,
        ep_a,
        "msg_dead",
        "failed",
        [(503, None, 120, "upstream down"), (None, "timeout", 5000, None)],
    )
    delivery(engine, ep_b, "msg_b", "failed", [(500, None, 9, "b is down")])
    sign_in(client, world["op"])
    page = html(client, "/ui/deliveries")
    assert all(m in page for m in ("msg_ok", "msg_dead", "msg_b"))
    failed = html(client, "/ui/deliveries?state=failed")
    assert "msg_dead" in failed and "msg_b" in failed and "msg_ok" not in failed
    only_a = html(client, f"/ui/deliveries?endpoint={ep_a.public_id}&state=failed")
    assert "msg_dead" in only_a and "msg_b" not in only_a
    detail = html(client, "/ui/deliveries/msg_dead")
    for shown in ("HTTP 503", "120 ms", "upstream down", "timeout", "5000 ms"):
        assert shown in detail
    assert 'href="/ui/deliveries/msg_dead/replay' in detail
    # A tenant's token sees only its tenant's deliveries.
    client.post("/ui/logout", data={"csrf": grab(CSRF, page)})
    sign_in(client, world["op_a"])
    assert "msg_b" not in html(client, "/ui/deliveries")
    assert client.get("/ui/deliveries/msg_b").status_code == 404


# --- endpoints -------------------------------------------------------------------------


def test_endpoint_health_shows_success_rate_latency_last_error_and_circuit(client, engine, world):
    ep = endpoint(engine, "ta")
    delivery(engine, ep, "msg_1", "delivered", [(200, None, 10, None)] * 3)
    delivery(engine, ep, "msg_2", "failed", [(500, None, 30, "db is on fire")])
    with engine.begin() as conn:
        conn.execute(text("UPDATE endpoints SET circuit = 'open' WHERE id = :e"), {"e": ep.id})
    sign_in(client, world["viewer"])
    row = html(client, "/ui/endpoints")
    assert "75.0%" in row and "of 4" in row  # 3 of 4 attempts answered 2xx
    assert "open circuit" in row and "HTTP 500" in row
    page = html(client, f"/ui/endpoints/{ep.public_id}")
    assert "db is on fire" in page and "1 failed" in page and "1 active" in page
    assert "whsec_a" not in page  # a secret is counted, never shown
    assert 'id="disable"' not in page  # a viewer has no levers


def health_of(client, public_id: str) -> str:
    return grab(
        rf'(?s)data-endpoint="{public_id}".*?data-health="([a-z_]+)"',
        html(client, "/ui/endpoints"),
    )


def test_one_state_from_the_recent_outcomes_and_the_levers_shared_with_the_cli(
    client, engine, world
):
    from click.testing import CliRunner

    from inbox.cli import main

    down = endpoint(engine, "ta", "https://down.example/h")
    for i in range(3):  # answered, but 500 every time
        delivery(engine, down, f"msg_down{i}", "failed", [(500, None, 20, "oops")] * 4)
    up = endpoint(engine, "ta", "https://up.example/h")
    delivery(engine, up, "msg_up", "delivered", [(200, None, 10, None)] * 5)
    recovered = endpoint(engine, "ta", "https://recovered.example/h")
    delivery(engine, recovered, "msg_r1", "failed", [(500, None, 10, None)])
    delivery(engine, recovered, "msg_r2", "delivered", [(200, None, 10, None)] * 9)
    shaky = endpoint(engine, "ta", "https://shaky.example/h")
    delivery(engine, shaky, "msg_s1", "failed", [(503, None, 10, None)] * 3)
    delivery(engine, shaky, "msg_s2", "delivered", [(200, None, 10, None)] * 2)
    quiet = endpoint(engine, "ta", "https://quiet.example/h")
    paused = endpoint(engine, "ta", "https://paused.example/h")
    off = endpoint(engine, "ta", "https://off.example/h")
    with engine.begin() as conn:
        conn.execute(text("UPDATE endpoints SET circuit = 'half_open' WHERE id = :e"), {"e": up.id})
        conn.execute(text("UPDATE endpoints SET paused = true WHERE id = :e"), {"e": paused.id})
        conn.execute(text("UPDATE endpoints SET enabled = false WHERE id = :e"), {"e": off.id})
    want = {
        down.public_id: "degraded",  # every recent attempt failed, the circuit never opened
        up.public_id: "open_circuit",
        recovered.public_id: "healthy",  # 1 of 10 failed: not over 10 %
        shaky.public_id: "degraded",
        quiet.public_id: "healthy",  # nothing sent lately
        paused.public_id: "paused",
        off.public_id: "disabled",
    }
    sign_in(client, world["viewer"])
    assert {p: health_of(client, p) for p in want} == want
    listed = json.loads(CliRunner().invoke(main, ["endpoints", "list", "--json"]).output)
    assert {e["endpoint"]: e["state"] for e in listed if e["endpoint"] in want} == want


def test_the_empty_endpoints_page_suggests_a_command_that_works(client, engine, world):
    from click.testing import CliRunner

    from inbox.cli import main

    sign_in(client, world["op"])
    suggested = grab(r'id="no-endpoints">[^<]*<code>([^<]+)</code>', html(client, "/ui/endpoints"))
    args = suggested.replace("TENANT", "ta").replace("URL", "https://hooks.example/in").split()
    assert args[0] == "inbox"
    result = CliRunner().invoke(main, args[1:])
    assert result.exit_code == 0, result.output
    assert "https://hooks.example/in" in html(client, "/ui/endpoints")


def test_disable_enable_and_rotate_are_audited_and_change_what_is_sent(client, engine, world):
    ep = endpoint(engine, "ta")
    sign_in(client, world["op"])
    page = f"/ui/endpoints/{ep.public_id}"
    resp = post(client, f"{page}/disable", page)
    assert resp.status_code == 302
    with engine.connect() as conn:
        assert not ereads.get_endpoint(conn, ep.id).enabled
    assert "disabled by alice-oncall" in html(client, page)
    assert post(client, f"{page}/enable", page).status_code == 302
    rotated = post(client, f"{page}/rotate", page)
    body = rotated.get_data(as_text=True)
    assert rotated.status_code == 200
    secret = grab(r'<pre class="code" id="secret-value">([^<]+)</pre>', body)
    with engine.connect() as conn:
        now = ereads.get_endpoint(conn, ep.id)
    assert now.enabled and set(now.secrets) == {"whsec_a", secret}
    assert secret not in html(client, page)  # shown once, on the answer to the rotation
    assert post(client, f"{page}/finish-rotation", page).status_code == 302
    with engine.connect() as conn:
        assert ereads.get_endpoint(conn, ep.id).secrets == (secret,)
        actions = conn.execute(
            text("SELECT actor, action FROM audit_log WHERE subject_kind = 'endpoint' ORDER BY id")
        ).all()
    assert [a.action for a in actions] == ["disable", "enable", "rotate", "finish rotation"]
    assert {a.actor for a in actions} == {"alice-oncall"}


def test_endpoint_levers_are_refused_to_viewers_and_other_tenants(client, engine, world):
    ep_b = endpoint(engine, "tb")
    sign_in(client, world["viewer"])
    page = f"/ui/endpoints/{ep_b.public_id}"
    assert post(client, f"{page}/disable", page).status_code == 403
    client.post("/ui/logout", data={"csrf": grab(CSRF, html(client, "/ui/events"))})
    sign_in(client, world["op_a"])
    assert client.get(page).status_code == 404
    assert post(client, f"{page}/disable", "/ui/endpoints").status_code == 404
    assert post(client, f"{page}/rotate", "/ui/endpoints").status_code == 404
    with engine.connect() as conn:
        ep = ereads.get_endpoint(conn, ep_b.id)
        audits = conn.execute(text("SELECT count(*) FROM audit_log")).scalar_one()
    assert ep.enabled and ep.secrets == ("whsec_a",) and audits == 0


# --- sources ---------------------------------------------------------------------------


def test_sources_show_scheme_options_and_a_count_of_secrets_never_the_secrets(
    client, engine, make_source, world
):
    make_source(
        tenant="ta",
        name="stripe",
        scheme="hmac",
        secrets_=("sk_one_abc", "sk_two_def"),
        max_attempts=3,
        redact_paths=["card.number"],
    )
    quarantine(engine, world["a"], 2, "evt_q")
    sign_in(client, world["op"])
    page = html(client, "/ui/sources")
    row = page[page.index('data-source="ta/stripe"') :]
    row = row[: row.index("</tr>", row.index("options-row"))]
    assert "hmac" in row and "card.number" in row and "max_attempts" in row
    assert "/hooks/ta/stripe" in row
    assert re.search(r'data-field="secrets">2\b', row)
    assert "sk_one_abc" not in page and "sk_two_def" not in page and "s3cret" not in page
    billing = page[page.index('data-source="ta/billing"') :]
    assert "2 quarantined" in billing[: billing.index("</tr>")]
    assert 'data-source="tb/shop"' in page
    client.post("/ui/logout", data={"csrf": grab(CSRF, page)})
    sign_in(client, world["op_a"])
    assert 'data-source="tb/shop"' not in html(client, "/ui/sources")


# --- the dashboard's tiles -------------------------------------------------------------


def test_every_dashboard_tile_links_to_its_filtered_list(client, engine, world):
    ep = endpoint(engine, "ta")
    delivery(engine, ep, "msg_dead", "failed", [(500, None, 5, None)])
    sign_in(client, world["op"])
    page = html(client, "/ui/dashboard")
    tiles = dict(re.findall(r'<a class="tile[^"]*" id="tile-([a-z-]+)" href="([^"]+)"', page))
    assert tiles["deliveries-failed"] == "/ui/deliveries?state=failed"
    assert tiles["quarantined"] == "/ui/events?state=quarantined"
    assert set(tiles) == {
        "received",
        "processing",
        "oldest",
        "quarantined",
        "deliveries-due",
        "deliveries-failed",
    }
    assert "msg_dead" in html(client, tiles["deliveries-failed"].replace("&amp;", "&"))


# --- an event's whole failure history ----------------------------------------------------


def test_the_timeline_keeps_every_attempt_and_every_quarantine_across_replays(
    client,
    engine,
    make_source,
    world,
    wsettings,  # noqa: F811
):
    src = make_source(tenant="ta", name="flaky", event_type_path="type", max_attempts=2)
    send(client, src, {"type": "flaky", "poison": True, "password": "hunter2"}, "k-1")
    drain_all(engine, wsettings)
    evt = client.get("/ui/events")  # not signed in yet: just find the id
    with engine.connect() as conn:
        evt = conn.execute(text("SELECT public_id FROM events")).scalar_one()
    assert state_of(engine, evt) == "quarantined"
    sign_in(client, world["op"])
    assert post(client, f"/ui/events/{evt}/replay", f"/ui/events/{evt}").status_code == 302
    drain_all(engine, wsettings)
    assert state_of(engine, evt) == "quarantined"
    page = html(client, f"/ui/events/{evt}")
    timeline = page[page.index('<ol class="timeline">') : page.index("</ol>")]
    # Two runs of two attempts: attempt 1 retried, attempt 2 quarantined, twice over,
    # with the replay between them.
    titles = re.findall(r"<strong>([^<]+)</strong>", timeline)
    failures = [t for t in titles if "ttempt" in t]
    assert failures == [
        "Attempt 1 failed in step work",
        "Quarantined after attempt 2 in step work",
        "Attempt 1 failed in step work",
        "Quarantined after attempt 2 in step work",
    ]
    replay = next(i for i, t in enumerate(titles) if t.startswith("Replay") and "alice" in t)
    assert titles[replay - 2 : replay + 3] == [
        failures[0],
        failures[1],
        titles[replay],
        *failures[2:],
    ]
    assert timeline.count('error-text">RuntimeError: poison event</span>') == 4
    # Each attempt carries a traceback excerpt naming where it failed.
    traces = re.findall(r'<pre class="code small">([^<]+)</pre>', timeline)
    assert len(traces) == 4 and all("sink_playbooks.py" in t and " in work" in t for t in traces)
    assert all(t.strip().endswith("RuntimeError: poison event") for t in traces)
    sources = html(client, "/ui/sources")
    row = sources[sources.index('data-source="ta/flaky"') :]
    row = row[: row.index("</tr>")]
    assert re.search(r'error-text">4</span>', row) and "RuntimeError" in row  # four failures
    table = page[page.index('id="attempts"') :]
    assert table.count("quarantined</span>") >= 2 and table.count("retried</span>") == 2


def test_a_traceback_excerpt_is_redacted(client, engine, make_source, world, wsettings):  # noqa: F811
    from inbox.domain.failures import traceback_excerpt

    try:
        raise RuntimeError('login failed: password="hunter2" token=abcdefghijklmnopqrstuvwxyz12')
    except RuntimeError as exc:
        excerpt = traceback_excerpt(exc)
    assert "hunter2" not in excerpt and "abcdefghijklmnopqrstuvwxyz12" not in excerpt
    assert "test_ui_pages.py" in excerpt and "RuntimeError: login failed" in excerpt
    assert "/work/" not in excerpt  # no host paths: the module's last two parts only


def test_an_event_whose_callback_is_dead_does_not_show_as_plainly_completed(client, engine, world):
    [evt] = quarantine(engine, world["a"], 1, "evt_cb", state="completed")
    [ok] = quarantine(engine, world["a"], 1, "evt_fine", state="completed")
    ep = endpoint(engine, "ta")
    delivery(engine, ep, "msg_dead", "failed", [(410, None, 3, "gone")], event=evt)
    delivery(engine, ep, "msg_ok", "delivered", [(200, None, 3, None)], event=ok)
    sign_in(client, world["viewer"])
    page = html(client, f"/ui/events/{evt}")
    assert 'id="callback-state">callback failed' in page and 'id="dead-callbacks"' in page
    assert "Callback dead (delivery failed)" in page
    assert 'id="callback-state"' not in html(client, f"/ui/events/{ok}")
    listing = html(client, "/ui/events")
    row = listing[listing.index(f">{evt}<") :]
    assert "callback failed" in row[: row.index("</tr>")]
    row = listing[listing.index(f">{ok}<") :]
    assert "callback failed" not in row[: row.index("</tr>")]


# --- dead letters, grouped ---------------------------------------------------------------


def test_dead_letters_are_grouped_and_a_group_replays_only_itself(client, engine, world):
    a = world["a"]
    quarantine(engine, a, 3, "evt_v")  # sim.swap / ValueError
    quarantine(engine, a, 2, "evt_k")
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE events SET last_error_class = 'KeyError', finished_at = now()"
                " WHERE public_id LIKE 'evt_k%'"
            )
        )
        conn.execute(text("UPDATE events SET finished_at = now() WHERE finished_at IS NULL"))
    quarantine(engine, world["b"], 1, "evt_b")
    sign_in(client, world["op"])
    page = html(client, "/ui/dead-letters")
    groups = re.findall(
        r'<tr class="group">\s*<td data-label="Source">([^<]+)</td>\s*<td data-label="Type">'
        r'([^<]+)</td>.*?error-text">([^<]+)</span>.*?data-field="count">(\d+)<',
        page,
        re.S,
    )
    assert groups == [
        ("ta / billing", "sim.swap", "ValueError", "3"),
        ("ta / billing", "sim.swap", "KeyError", "2"),
        ("tb / shop", "sim.swap", "ValueError", "1"),
    ]
    link = re.findall(r'href="(/ui/replays/new\?[^"]+)"', page)[1].replace("&amp;", "&")
    assert "error=KeyError" in link
    confirm = client.get(link).get_data(as_text=True)
    assert "<strong>2</strong>" in confirm
    form = {k: v for k, v in re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', confirm)}
    resp = client.post("/ui/replays", data={**form, "rate": "1000"})
    assert resp.status_code == 302
    with engine.connect() as conn:
        job_id = conn.execute(text("SELECT id FROM bulk_replays")).scalar_one()
    assert run_bulk_once(Runtime(Settings(), engine), job_id).moved == 2
    assert [state_of(engine, f"evt_k{i}") for i in (1, 2)] == ["received"] * 2
    assert [state_of(engine, f"evt_v{i}") for i in (1, 2, 3)] == ["quarantined"] * 3
    assert state_of(engine, "evt_b1") == "quarantined"


# --- bulk replay outcomes --------------------------------------------------------------


def test_a_bulk_replay_whose_events_all_return_to_quarantine_is_not_green(
    client,
    engine,
    make_source,
    world,
    wsettings,  # noqa: F811
):
    src = make_source(tenant="ta", name="flaky", event_type_path="type", max_attempts=1)
    send(client, src, {"type": "flaky", "poison": True}, "p1")
    send(client, src, {"type": "flaky", "poison": True}, "p2")
    send(client, src, {"type": "flaky", "n": 1}, "fine")
    drain_all(engine, wsettings)
    sign_in(client, world["op"])
    confirm = html(client, "/ui/replays/new?tenant=ta&source=flaky")
    form = {k: v for k, v in re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', confirm)}
    job = client.post("/ui/replays", data={**form, "rate": "1000"}).headers["Location"]
    job = job.rsplit("/", 1)[1]
    queued = client.get(f"/ui/replays/{job}/progress").json
    assert queued["eta_seconds"] == pytest.approx(2 / 1000) and queued["verdict"] == "active"
    with engine.connect() as conn:
        job_id = conn.execute(text("SELECT id FROM bulk_replays")).scalar_one()
    run_bulk_once(Runtime(Settings(), engine), job_id)
    moved = client.get(f"/ui/replays/{job}/progress").json
    assert moved["status"] == "completed" and moved["pending"] == 2
    assert moved["label"] == "moved; results pending" and not moved["settled"]
    drain_all(engine, wsettings)
    done = client.get(f"/ui/replays/{job}/progress").json
    assert (done["succeeded"], done["dead_again"], done["pending"]) == (0, 2, 0)
    assert done["verdict"] == "bad" and done["label"] == "all quarantined again"
    assert done["css"] == "failed" and done["settled"]
    page = html(client, f"/ui/replays/{job}")
    assert 'class="state state-failed" data-field="label"' in page
    assert "all quarantined again" in page and "state-completed" not in page
    dash = html(client, "/ui/dashboard")
    assert "all quarantined again" in dash and 'state-completed">completed' not in dash


# --- search ------------------------------------------------------------------------------


def test_search_finds_events_by_id_key_and_provider_id_within_the_scope(
    client, engine, make_source, world
):
    src_a = make_source(tenant="ta", name="hooks", event_id_path="id")
    src_b = make_source(tenant="tb", name="hooks", event_id_path="id")
    assert send(client, src_a, {"id": "prov_123"}, None).status_code == 202
    assert send(client, src_a, {"n": 1}, "order-77-paid").status_code == 202
    assert send(client, src_b, {"n": 2}, "order-77-paid").status_code == 202
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT public_id, tenant_id FROM events ORDER BY id")).all()
        stored = conn.execute(
            text(
                "SELECT count(*) FROM events WHERE headers::text LIKE "
                "'%order-77%' OR body::text LIKE '%order-77%'"
            )
        ).scalar_one()
    assert stored == 0  # the key is not kept anywhere in clear
    by_provider, by_key_a, by_key_b = (r.public_id for r in rows)
    sign_in(client, world["op"])
    resp = client.get("/ui/search?q=prov_123")
    assert resp.status_code == 302 and resp.headers["Location"].endswith(
        f"/ui/events/{by_provider}"
    )
    resp = client.get(f"/ui/search?q={by_key_a}")
    assert resp.headers["Location"].endswith(f"/ui/events/{by_key_a}")
    both = html(client, "/ui/search?q=order-77-paid")  # two tenants: a list of two
    assert by_key_a in both and by_key_b in both
    assert "no-hits" in html(client, "/ui/search?q=order-78-paid")
    client.post("/ui/logout", data={"csrf": grab(CSRF, both)})
    sign_in(client, world["op_a"])
    resp = client.get("/ui/search?q=order-77-paid")
    assert resp.headers["Location"].endswith(f"/ui/events/{by_key_a}")
    assert "no-hits" in html(client, f"/ui/search?q={by_key_b}")
