"""The console in a real headless Chromium, against the real web server with real celery processes.

Uses the system's Chromium (``/usr/bin/chromium``) driven by Playwright; no browser is
ever downloaded. Screenshots of the phone-sized pages go to ``.data/``.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import text

from inbox.store.write import tokens as tstore
from tests.e2e.test_worker_processes import wait_for
from tests.helpers import body_of, events_by_state, eventually, hmac_headers, sink_rows
from tests.procs import ROOT, CeleryProc, Web
from tests.sink_playbooks import CRASH_DIR

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("sink_table")]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = ROOT / ".data"


@pytest.fixture
def env(database_url: str, redis_url: str) -> dict[str, str]:
    redis.Redis.from_url(redis_url).flushdb()
    return {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "INBOX_PLAYBOOKS": "tests.sink_playbooks",
        "INBOX_LEASE_SECONDS": "3",
        "INBOX_SWEEP_SECONDS": "1",
        "INBOX_RETRY_BASE_SECONDS": "0.05",
        # Two web workers must both accept a session the other signed.
        "INBOX_SECRET_KEY": "e2e-console-" + os.urandom(8).hex(),
    }


@pytest.fixture
def procs() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for p in started:
        p.stop(signal.SIGKILL if isinstance(p, CeleryProc) else signal.SIGTERM)


@pytest.fixture
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("no system Chromium at /usr/bin/chromium (browsers are never downloaded)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Watch:
    """Collects what a page did that it must not: script errors (a CSP violation is one)
    and requests to anywhere but our server."""

    def __init__(self, page: Any, base: str) -> None:
        self.errors: list[str] = []
        self.foreign: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on(
            "console",
            lambda msg: self.errors.append(msg.text) if msg.type == "error" else None,
        )
        page.on(
            "request",
            lambda req: None if req.url.startswith(base) else self.foreign.append(req.url),
        )

    def check(self) -> None:
        assert self.errors == [] and self.foreign == []


def token(engine, name: str, role: str) -> str:
    with engine.begin() as conn:
        return tstore.create_token(conn, name, role)[1]


def sign_in(page: Any, base: str, secret: str, path: str = "/ui/events") -> None:
    page.goto(base + path)
    assert "/ui/login" in page.url
    page.fill("#token", secret)
    page.click("button[type=submit]")
    page.wait_for_url(base + path)


def quarantine_sql(engine, src, n: int, prefix: str, payload: dict[str, Any]) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO events (public_id, tenant_id, source_id, event_type, content_type,"
                " body, body_sha256, response_status, response_body, state, attempts,"
                " max_attempts, finished_at, last_error_class, last_error_message)"
                " SELECT :p || g, :t, :s, :type, 'application/json', CAST(:body AS bytea),"
                " '\\x00', 202, '', 'quarantined', 1, 1, now(), 'RuntimeError', 'downstream'"
                "  FROM generate_series(1, :n) g"
            ),
            {
                "p": prefix,
                "t": src.tenant_id,
                "s": src.id,
                "n": n,
                "type": payload["type"],
                "body": body_of(payload).decode(),
            },
        )


def state(engine, public_id: str) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(
                text("SELECT state FROM events WHERE public_id = :p"), {"p": public_id}
            ).scalar_one()
        )


def test_an_operator_replays_a_dead_letter_and_a_bulk_replay_in_the_browser(
    env, procs, make_source, engine, browser
):
    from playwright.sync_api import expect

    src = make_source(event_type_path="type", max_attempts=1, name="billing")
    bulk_src = make_source(tenant=src.tenant, name="bulk", event_type_path="type")
    web = Web(env)
    procs.append(web)
    procs += [CeleryProc(env), CeleryProc(env, kind="beat")]
    base = f"http://127.0.0.1:{web.port}"

    # A real dead letter: ingested, its second step fails while the marker exists.
    CRASH_DIR.mkdir(parents=True, exist_ok=True)
    marker = f"ui-e2e-{os.getpid()}"
    (CRASH_DIR / marker).touch()
    body = body_of({"type": "two.step", "fail_marker": marker})
    status, _, answer = web.request("POST", src.path, body, hmac_headers("s3cret", body, "ui-1"))
    assert status == 202
    evt = answer.decode().split('"id":"')[1].split('"')[0]
    wait_for(lambda: state(engine, evt) == "quarantined", 60, "the event's quarantine")
    (CRASH_DIR / marker).unlink()
    quarantine_sql(engine, bulk_src, 30, "evt_bulk", {"type": "flaky"})

    secret = token(engine, "alice-oncall", "operator")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    watch = Watch(page, base)
    sign_in(page, base, secret)

    # Find it through the list's filters, open it, replay it with the confirmation.
    page.select_option("select[name=state]", "quarantined")
    page.fill("input[name=source]", "billing")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**/ui/events?*state=quarantined*")
    assert page.locator("table.list tbody tr").count() == 1
    page.click(f"text={evt}")
    expect(page.locator("#event-state")).to_have_text("quarantined")
    page.click("#replay")
    expect(page.locator("h1")).to_have_text("Replay this event?")
    assert state(engine, evt) == "quarantined"
    page.click("#confirm")
    page.wait_for_url(f"{base}/ui/events/{evt}")
    # The page refreshes itself while the event is in the inbox.
    expect(page.locator("#event-state")).to_have_text("completed", timeout=60_000)
    expect(page.locator("ol.timeline")).to_contain_text("Replay 1 by alice-oncall")
    assert state(engine, evt) == "completed"
    # notify failed once and ran again; the completed charge step was not repeated
    assert [r.step for r in sink_rows(engine)] == ["charge", "notify", "notify"]

    # Bulk: the filtered list's button, the confirmation, then the live progress bar.
    page.goto(f"{base}/ui/events?state=quarantined&source=bulk")
    page.click("text=Replay every quarantined event matching these filters")
    expect(page.locator("#matching strong")).to_have_text("30")
    page.fill("#rate", "10")
    page.click("#confirm")
    page.wait_for_url("**/ui/replays/rpl_*")
    page.evaluate("window.__notReloaded = true")
    seen: set[int] = set()

    def full() -> bool:
        value = int(page.eval_on_selector("#bulk-progress", "el => el.value"))
        seen.add(value)
        return value == 100

    eventually(full, 60, interval=0.2)
    assert 100 in seen, f"the bar stopped at {max(seen)}"
    assert any(0 < v < 100 for v in seen), seen  # it moved while the job ran
    assert page.evaluate("window.__notReloaded === true")  # updated in place, by polling
    # Green only once the moved events have completed, not when they were merely moved.
    expect(page.locator("[data-field=label]")).to_have_text("completed", timeout=60_000)
    expect(page.locator("#bulk-verdict")).to_have_class("state state-completed")
    expect(page.locator("[data-field=moved]")).to_have_text("30")
    wait_for(
        lambda: events_by_state(engine) == {"completed": 31}, 60, "the bulk replay's completions"
    )
    assert len(sink_rows(engine)) == 3 + 30
    watch.check()
    page.close()


def seed_for_phone(engine, make_source) -> str:
    """Pages as crowded as they get: long ids, headers, a long body, steps, a delivery."""
    src = make_source(tenant="acme-corporation-europe", name="billing-provider-primary")
    quarantine_sql(engine, src, 60, "evt_phone", {"type": "sim.swap"})
    long_value = "x" * 300
    with engine.begin() as conn:
        ev = conn.execute(
            text(
                "UPDATE events SET headers = CAST(:h AS jsonb), body = CAST(:b AS bytea),"
                " duplicate_count = 2, first_duplicate_at = now(), last_duplicate_at = now(),"
                " event_type = 'customer.subscription.trial_will_end.notification'"
                " WHERE public_id = 'evt_phone1' RETURNING id"
            ),
            {
                "h": '{"user-agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",'
                f' "x-very-long-header-name-from-a-provider": "{long_value}"}}',
                "b": body_of({"type": "sim.swap", "account": "acct-" + "9" * 200, "n": 1}),
            },
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO steps (event_id, name, result, attempt) VALUES"
                " (:e, 'lookup-the-account-in-the-billing-system', CAST(:r AS jsonb), 1)"
            ),
            {"e": ev, "r": '{"account": "' + "y" * 200 + '"}'},
        )
        ep = conn.execute(
            text(
                "INSERT INTO endpoints (public_id, tenant_id, url) VALUES ('ep_phone', :t,"
                " 'https://fraud-prevention.internal.example.com/hooks/v2/inbound') RETURNING id"
            ),
            {"t": src.tenant_id},
        ).scalar_one()
        d = conn.execute(
            text(
                "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type,"
                " body, state, attempts, last_error) VALUES ('msg_phone_' || repeat('z', 40),"
                " :t, :e, :ev, 'sim.denied', '{}', 'failed', 4, 'HTTP 503') RETURNING id"
            ),
            {"t": src.tenant_id, "e": ep, "ev": ev},
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO delivery_attempts (delivery_id, status, latency_ms, excerpt)"
                " VALUES (:d, 503, 5012, :x)"
            ),
            {"d": d, "x": "Service Unavailable " + "w" * 200},
        )
    return "evt_phone1"


def test_the_console_fits_a_phone(env, procs, make_source, engine, browser):
    evt = seed_for_phone(engine, make_source)
    web = Web(env)
    procs.append(web)
    base = f"http://127.0.0.1:{web.port}"
    secret = token(engine, "phone-ops", "operator")
    context = browser.new_context(
        viewport={"width": 375, "height": 812}, is_mobile=True, has_touch=True
    )
    page = context.new_page()
    watch = Watch(page, base)
    sign_in(page, base, secret, "/ui/dashboard")
    pages = {
        "dashboard": "/ui/dashboard",
        "dashboard-day": "/ui/dashboard?window=day",
        "list": "/ui/events?state=quarantined",
        "event": f"/ui/events/{evt}",
        "confirm": f"/ui/events/{evt}/replay",
        "bulk": "/ui/replays/new",
    }
    SHOTS.mkdir(exist_ok=True)
    for name, path in pages.items():
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        inner, scroll = page.evaluate("[window.innerWidth, document.documentElement.scrollWidth]")
        assert inner == 375, (name, inner)  # not zoomed out to fit something too wide
        assert scroll <= inner, f"{name}: the page is {scroll}px wide on a {inner}px screen"
        page.screenshot(path=str(SHOTS / f"console-phone-{name}.png"), full_page=True)
        if name == "list":  # every column of a row is on the screen, labelled
            assert_rows_fit(page, inner, name)
    watch.check()
    context.close()


def assert_rows_fit(page: Any, width: int, name: str) -> None:
    """Every cell of every list table lies inside the screen: nothing to scroll sideways to."""
    out = page.evaluate(
        """w => [...document.querySelectorAll('table.rows tbody td')]
             .filter(td => td.offsetParent !== null)
             .map(td => td.getBoundingClientRect())
             .filter(r => r.left < 0 || r.right > w + 0.5).length""",
        width,
    )
    assert out == 0, f"{name}: {out} table cells are off a {width}px screen"


def seed_every_page(engine, make_source) -> dict[str, str]:
    """One of everything a page lists: quarantined events with attempts, a completed
    event whose callback is dead, endpoints with good and bad attempts, a bulk replay."""
    evt = seed_for_phone(engine, make_source)
    src = make_source(tenant="acme-corporation-europe", name="shop", secrets_=("a", "b"))
    with engine.begin() as conn:
        ev = conn.execute(
            text("SELECT id FROM events WHERE public_id = :p"), {"p": evt}
        ).scalar_one()
        for n, outcome in ((1, "retry"), (2, "quarantined")):
            conn.execute(
                text(
                    "INSERT INTO event_attempts (event_id, attempt, step, error_class,"
                    " error_message, traceback, outcome) VALUES (:e, :n, 'lookup', 'KeyError',"
                    " 'account', 'inbox/playbooks.py:12 in lookup\\nKeyError: account', :o)"
                ),
                {"e": ev, "n": n, "o": outcome},
            )
        ep = conn.execute(text("SELECT id FROM endpoints WHERE public_id = 'ep_phone'")).scalar()
        d = conn.execute(
            text(
                "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_type, body,"
                " state, attempts, last_status) VALUES ('msg_ok', :t, :e, 'sim.ok', '{}',"
                " 'delivered', 1, 200) RETURNING id"
            ),
            {"t": src.tenant_id, "e": ep},
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO delivery_attempts (delivery_id, status, latency_ms, excerpt)"
                " VALUES (:d, 200, 40, 'ok')"
            ),
            {"d": d},
        )
        conn.execute(
            text(
                "INSERT INTO events (public_id, tenant_id, source_id, event_type, content_type,"
                " body, body_sha256, response_status, response_body, state, attempts,"
                " finished_at, outcome) VALUES ('evt_done', :t, :s, 'sim.swap',"
                " 'application/json', '{}', '\\x00', 202, '', 'completed', 1, now(),"
                " 'completed')"
            ),
            {"t": src.tenant_id, "s": src.id},
        )
        conn.execute(
            text(
                "UPDATE deliveries SET event_id = (SELECT id FROM events"
                " WHERE public_id = 'evt_done'), finished_at = now() WHERE state = 'failed'"
            )
        )
    return {"event": evt, "dead_callback": "evt_done"}


SIZES = {"desktop": (1280, 800), "phone": (390, 844)}


@pytest.mark.parametrize("size", sorted(SIZES))
def test_every_console_page_in_a_browser(env, procs, make_source, engine, browser, size):
    from playwright.sync_api import expect

    seeded = seed_every_page(engine, make_source)
    web = Web(env)
    procs.append(web)
    base = f"http://127.0.0.1:{web.port}"
    width, height = SIZES[size]
    phone = size == "phone"
    context = browser.new_context(
        viewport={"width": width, "height": height}, is_mobile=phone, has_touch=phone
    )
    page = context.new_page()
    watch = Watch(page, base)
    sign_in(page, base, token(engine, "pages-ops", "operator"), "/ui/dashboard")

    # A bulk replay of one dead-letter group, started from the grouped page.
    page.goto(base + "/ui/dead-letters")
    # 59 of one type, and evt_phone1 with a type of its own; the larger group first.
    expect(page.locator("#groups tr.group")).to_have_count(2)
    expect(page.locator("#groups [data-field=count]").first).to_have_text("59")
    page.locator("#groups .replay-group").first.click()
    expect(page.locator("#matching strong")).to_have_text("59")
    page.click("#confirm")
    page.wait_for_url("**/ui/replays/rpl_*")
    replay = page.url[len(base) :]

    # The header's search box: an event id goes straight to the event.
    page.goto(base + "/ui/dashboard")
    page.fill("form.search input[name=q]", seeded["event"])
    page.press("form.search input[name=q]", "Enter")
    page.wait_for_url(f"{base}/ui/events/{seeded['event']}")
    expect(page.locator("#attempts tbody tr")).to_have_count(2)

    pages = {
        "dashboard": "/ui/dashboard",
        "events": "/ui/events",
        "event": f"/ui/events/{seeded['event']}",
        "dead-callback": f"/ui/events/{seeded['dead_callback']}",
        "deliveries": "/ui/deliveries",
        "delivery": "/ui/deliveries/msg_ok",
        "endpoints": "/ui/endpoints",
        "endpoint": "/ui/endpoints/ep_phone",
        "sources": "/ui/sources",
        "dead-letters": "/ui/dead-letters",
        "search": "/ui/search?q=nothing-like-this",
        "replay": replay,
    }
    SHOTS.mkdir(exist_ok=True)
    for name, path in pages.items():
        resp = page.goto(base + path)
        assert resp is not None and resp.status == 200, (name, resp and resp.status)
        page.wait_for_load_state("networkidle")
        inner, scroll = page.evaluate("[window.innerWidth, document.documentElement.scrollWidth]")
        assert inner == width, (name, inner)
        assert scroll <= inner, f"{name}: the page is {scroll}px wide on a {inner}px screen"
        if phone:
            assert_rows_fit(page, inner, name)
        page.screenshot(path=str(SHOTS / f"console-{size}-{name}.png"), full_page=True)
        page.screenshot(path=str(SHOTS / f"console-{size}-{name}-top.png"))

    # The outcome colours are the outcome's, not the accent every bar used to get.
    page.goto(base + "/ui/dashboard")
    fills = page.evaluate(
        """() => Object.fromEntries(['ok', 'server'].map(c => [c,
             getComputedStyle(document.querySelector('svg.chart-attempts .bar.' + c)).fill]))"""
    )
    assert fills == {"ok": "rgb(31, 138, 76)", "server": "rgb(197, 48, 48)"}, fills
    # Every tile is a link to its list, the failed deliveries too.
    page.click("#tile-deliveries-failed")
    page.wait_for_url("**/ui/deliveries?state=failed")
    expect(page.locator("#deliveries tbody tr")).to_have_count(1)
    # The completed event whose callback died says so.
    page.goto(base + f"/ui/events/{seeded['dead_callback']}")
    expect(page.locator("#callback-state")).to_have_text("callback failed")
    # Rotating an endpoint's secret shows the new one once; the count goes up.
    page.goto(base + "/ui/endpoints/ep_phone")
    page.click("#rotate")
    expect(page.locator("#secret-value")).to_have_text(re.compile(r"^whsec_"))
    expect(page.locator("#active-secrets")).to_contain_text("1 active")  # it had none
    watch.check()
    context.close()
