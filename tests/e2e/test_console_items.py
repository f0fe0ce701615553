"""The console in Chromium at a laptop's 1280 px: the Deliveries table shows every column,
an endpoint that answers 500 is not "healthy", and a dead-letter group without an event
type is replayed as a group."""

# ruff: noqa: F811  (the console's fixtures, imported from its browser test)

from __future__ import annotations

import secrets
from typing import Any

import pytest
from sqlalchemy import text

from tests.e2e.test_console_browser import (  # noqa: F401  (fixtures)
    Watch,
    browser,
    env,
    procs,
    sign_in,
    token,
)
from tests.procs import Web

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("sink_table")]

LAPTOP = {"width": 1280, "height": 800}


def _event_id() -> str:
    return "evt_20261203" + secrets.token_hex(8)  # as intake makes them


def seed(engine, src) -> dict[str, Any]:
    """Deliveries as long as real ones: webhook-ids, event ids, an endpoint URL, a type and
    an error; one endpoint that answered 500 to everything, one that answered 200."""
    with engine.begin() as conn:
        events = [_event_id() for _ in range(6)]
        ids = [
            conn.execute(
                text(
                    "INSERT INTO events (public_id, tenant_id, source_id, event_type,"
                    " content_type, body, body_sha256, response_status, response_body, state,"
                    " attempts, max_attempts, finished_at) VALUES (:p, :t, :s,"
                    " 'customer.subscription.updated', 'application/json', '{}', '\\x00', 202,"
                    " '', 'completed', 1, 5, now()) RETURNING id"
                ),
                {"p": p, "t": src.tenant_id, "s": src.id},
            ).scalar_one()
            for p in events
        ]
        endpoints = {}
        for name, url in (
            ("down", "https://fraud-prevention.internal.example.com/hooks/v2/inbound"),
            ("up", "https://billing.example.com/webhooks/inbox"),
        ):
            endpoints[name] = conn.execute(
                text(
                    "INSERT INTO endpoints (public_id, tenant_id, url) VALUES (:p, :t, :u)"
                    " RETURNING id"
                ),
                {"p": "ep_" + secrets.token_hex(8), "t": src.tenant_id, "u": url},
            ).scalar_one()
        for i, ev in enumerate(ids):
            down = i % 2 == 0
            status = 500 if down else 200
            d = conn.execute(
                text(
                    "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id,"
                    " event_type, body, state, attempts, last_status, last_error, finished_at)"
                    " VALUES (:p, :t, :e, :ev, 'fraud.decision.recorded', '{}', :s, 4, :st,"
                    " :le, now()) RETURNING id"
                ),
                {
                    "p": "msg_" + secrets.token_hex(12),
                    "t": src.tenant_id,
                    "e": endpoints["down" if down else "up"],
                    "ev": ev,
                    "s": "failed" if down else "delivered",
                    "st": status,
                    "le": "HTTP 500 Internal Server Error" if down else None,
                },
            ).scalar_one()
            for _ in range(4 if down else 1):
                conn.execute(
                    text(
                        "INSERT INTO delivery_attempts (delivery_id, status, latency_ms, excerpt)"
                        " VALUES (:d, :s, 40, :x)"
                    ),
                    {"d": d, "s": status, "x": "Internal Server Error" if down else "ok"},
                )
    return {"events": events}


def quarantine(engine, src, n: int, event_type: str | None) -> list[str]:
    made = [_event_id() for _ in range(n)]
    with engine.begin() as conn:
        for public_id in made:
            conn.execute(
                text(
                    "INSERT INTO events (public_id, tenant_id, source_id, event_type,"
                    " content_type, body, body_sha256, response_status, response_body, state,"
                    " attempts, max_attempts, finished_at, last_error_class,"
                    " last_error_message) VALUES (:p, :t, :s, :type, 'application/json', '{}',"
                    " '\\x00', 202, '', 'quarantined', 5, 5, now(), 'RuntimeError', 'downstream')"
                ),
                {"p": public_id, "t": src.tenant_id, "s": src.id, "type": event_type},
            )
    return made


def test_deliveries_and_endpoints_at_1280_px(env, procs, make_source, engine, browser):
    from playwright.sync_api import expect

    src = make_source(tenant="acme-corporation", name="billing")
    seeded = seed(engine, src)
    web = Web(env)
    procs.append(web)
    base = f"http://127.0.0.1:{web.port}"
    page = browser.new_page(viewport=LAPTOP)
    watch = Watch(page, base)
    sign_in(page, base, token(engine, "laptop-ops", "operator"), "/ui/deliveries")

    # Every column of the Deliveries table is on screen, the Event column whole.
    wrap = page.locator(".table-wrap").first
    scroll, client = wrap.evaluate("el => [el.scrollWidth, el.clientWidth]")
    assert scroll <= client, f"the table is {scroll}px wide in a {client}px box"
    outer = wrap.bounding_box()
    assert outer is not None
    right = outer["x"] + outer["width"]  # the box's right edge: past it is scrolled away
    cells = page.locator("#deliveries tbody td[data-label=Event]")
    expect(cells).to_have_count(len(seeded["events"]))
    for i in range(cells.count()):
        box = cells.nth(i).bounding_box()
        assert box is not None and box["x"] + box["width"] <= right + 0.5, (i, box, right)
        link = cells.nth(i).locator("a")
        assert link.inner_text() in seeded["events"]
        inner = link.evaluate("a => [a.scrollWidth, a.clientWidth]")
        assert inner[0] <= inner[1] or inner[1] == 0, inner  # not clipped inside its cell

    # 500 to every attempt: degraded, never healthy; the endpoint that answers is healthy.
    page.goto(base + "/ui/endpoints")
    health = dict(
        page.eval_on_selector_all(
            "#endpoints tbody tr",
            "rows => rows.map(r => [r.querySelector('.muted').innerText,"
            " r.querySelector('[data-health]').innerText])",
        )
    )
    assert health == {
        "acme-corporation · https://fraud-prevention.internal.example.com/hooks/v2/inbound": (
            "degraded"
        ),
        "acme-corporation · https://billing.example.com/webhooks/inbox": "healthy",
    }, health
    watch.check()
    page.close()


def test_a_dead_letter_group_without_a_type_is_replayed_as_a_group(
    env, procs, make_source, engine, browser
):
    from playwright.sync_api import expect

    src = make_source(tenant="acme", name="billing")
    untyped = quarantine(engine, src, 3, None)
    typed = quarantine(engine, src, 5, "invoice.paid")  # same source and error, a type
    web = Web(env)
    procs.append(web)
    base = f"http://127.0.0.1:{web.port}"
    page = browser.new_page(viewport=LAPTOP)
    watch = Watch(page, base)
    sign_in(page, base, token(engine, "group-ops", "operator"), "/ui/dead-letters")

    rows = page.locator("#groups tr.group")
    expect(rows).to_have_count(2)
    row = rows.filter(has=page.locator("td[data-label=Type]", has_text="—"))
    expect(row.locator("[data-field=count]")).to_have_text("3")
    row.locator(".replay-group").click()
    expect(page.locator("#matching strong")).to_have_text("3")
    page.click("#confirm")
    page.wait_for_url("**/ui/replays/rpl_*")
    job = page.url.rsplit("/", 1)[1]
    with engine.connect() as conn:
        items = conn.execute(
            text(
                "SELECT i.public_id FROM bulk_replay_items i JOIN bulk_replays j"
                " ON j.id = i.job_id WHERE j.public_id = :j"
            ),
            {"j": job},
        ).scalars()
        assert sorted(items) == sorted(untyped)
        left = conn.execute(
            text("SELECT public_id FROM events WHERE event_type IS NOT NULL")
        ).scalars()
        assert sorted(left) == sorted(typed)
    watch.check()
    page.close()
