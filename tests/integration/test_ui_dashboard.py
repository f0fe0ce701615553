"""The operator console's dashboard: the numbers of a scripted hour, drawn and queried."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from inbox.store.reads import dashboard
from tests.integration.ui_support import (
    grab,
    make_world,
    post,
    sign_in,
)


@pytest.fixture
def world(engine, make_source) -> dict[str, Any]:
    return make_world(engine, make_source)


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
    """The chart's 'now' is what inbox.store.reads.stats (the /metrics gauges) reports."""
    from inbox.store.reads import stats

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
