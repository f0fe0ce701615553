"""Per-tenant fairness settings on the real database: the claim honours a tenant's
in-flight cap and weight; both are set through the CLI and the API, with bad values
refused (4xx, nothing stored)."""

from __future__ import annotations

from collections import Counter

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text

from inbox.cli import main
from inbox.services import admin
from inbox.store.write import queue
from tests.integration.test_api import make_token


def pending(engine: Engine, src, n: int) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO events (public_id, tenant_id, source_id, content_type, body,"
                " body_sha256, response_status, response_body, event_type)"
                " SELECT :p || g, :t, :s, 'application/json', '{}', '\\x00', 202, '', 'noop'"
                " FROM generate_series(1, :n) g"
            ),
            {"p": f"evt_{src.name}_", "t": src.tenant_id, "s": src.id, "n": n},
        )


def claimed_by_tenant(engine: Engine, limit: int) -> Counter[int]:
    with engine.begin() as conn:
        claims = queue.claim(conn, "w", limit, 30)
        ids = [c.id for c in claims]
        rows = conn.execute(
            text("SELECT tenant_id FROM events WHERE id = ANY(:ids)"), {"ids": ids}
        ).all()
    return Counter(r[0] for r in rows)


def test_two_claims_at_once_do_not_both_take_a_caps_last_place(engine, two):
    """Two claims in flight together (the second before the first commits): the second
    cannot count the first's running events yet, so it must not serve the capped tenant."""
    heavy, light = two
    pending(engine, heavy, 10)
    pending(engine, light, 10)
    admin.set_fairness(engine, "heavy", max_in_flight=1)
    with engine.connect() as a, engine.connect() as b:
        ta, tb = a.begin(), b.begin()
        first = queue.claim(a, "a", 5, 30)
        second = queue.claim(b, "b", 5, 30)  # before the first commits
        ta.commit()
        tb.commit()
    with engine.connect() as conn:
        running = conn.execute(
            text("SELECT count(*) FROM events WHERE tenant_id = :t AND state = 'processing'"),
            {"t": heavy.tenant_id},
        ).scalar_one()
    assert running == 1, (first, second)


@pytest.fixture
def two(make_source):
    return make_source(tenant="heavy", name="h"), make_source(tenant="light", name="l")


def test_a_cap_bounds_what_runs_at_once_across_claims(engine, two):
    heavy, light = two
    pending(engine, heavy, 50)
    pending(engine, light, 50)
    admin.set_fairness(engine, "heavy", max_in_flight=3)
    first = claimed_by_tenant(engine, 20)
    assert first[heavy.tenant_id] == 3  # not filled past its cap by the oldest-first fill
    assert first[light.tenant_id] == 17
    again = claimed_by_tenant(engine, 20)
    assert again[heavy.tenant_id] == 0  # three of its events still run
    admin.set_fairness(engine, "heavy", no_cap=True)
    assert claimed_by_tenant(engine, 20)[heavy.tenant_id] > 0


def test_a_weight_is_a_share_of_each_claim(engine, two):
    heavy, light = two
    pending(engine, heavy, 50)
    pending(engine, light, 50)
    admin.set_fairness(engine, "heavy", weight=3)
    with engine.begin() as conn:  # the fill would hand out the rest oldest-first
        conn.execute(text("UPDATE tenants SET max_in_flight = 1000"))
    got = claimed_by_tenant(engine, 8)
    assert (got[heavy.tenant_id], got[light.tenant_id]) == (6, 2)


def test_the_cli_sets_and_lists_a_tenants_cap_and_weight(engine, two):
    runner = CliRunner()
    out = runner.invoke(main, ["tenants", "set", "heavy", "--max-in-flight", "5", "--weight", "2"])
    assert out.exit_code == 0, out.output
    assert "max 5 in flight, weight 2" in out.output
    listed = runner.invoke(main, ["tenants", "list"]).output
    assert "heavy" in listed and "5" in listed
    out = runner.invoke(main, ["tenants", "set", "heavy", "--no-cap"])
    assert "no cap, weight 2" in out.output
    bad = runner.invoke(main, ["tenants", "set", "heavy", "--weight", "0"])
    assert bad.exit_code == 2
    both = runner.invoke(main, ["tenants", "set", "heavy", "--no-cap", "--max-in-flight", "2"])
    assert both.exit_code == 2


def test_the_api_reads_and_sets_fairness_and_refuses_bad_values(client, engine, two):
    admin_h = make_token(engine, "ops", "operator")
    tenant_h = make_token(engine, "t", "operator", "light")
    resp = client.patch("/api/v1/tenants/heavy", json={"max_in_flight": 4}, headers=admin_h)
    assert resp.status_code == 200, resp.json
    assert resp.json == {"name": "heavy", "disabled": False, "max_in_flight": 4, "weight": 1}
    for body in ({"weight": 0}, {"weight": "2"}, {"max_in_flight": 0}, {"other": 1}, {}):
        resp = client.patch("/api/v1/tenants/heavy", json=body, headers=admin_h)
        assert resp.status_code == 400, body
        assert "error" in resp.json
    assert client.get("/api/v1/tenants/heavy", headers=admin_h).json["max_in_flight"] == 4
    resp = client.patch("/api/v1/tenants/heavy", json={"max_in_flight": None}, headers=admin_h)
    assert resp.json["max_in_flight"] is None
    # A tenant's token sees its own tenant only, and may not change its share.
    assert client.get("/api/v1/tenants/heavy", headers=tenant_h).status_code == 404
    assert client.get("/api/v1/tenants/light", headers=tenant_h).status_code == 200
    resp = client.patch("/api/v1/tenants/light", json={"weight": 9}, headers=tenant_h)
    assert resp.status_code == 403
    assert client.get("/api/v1/tenants/light", headers=admin_h).json["weight"] == 1


def test_a_bad_fairness_body_is_a_400_naming_every_field_and_changes_nothing(client, engine, two):
    admin_h = make_token(engine, "ops", "operator")
    before = client.get("/api/v1/tenants/heavy", headers=admin_h).json
    body = {"max_in_flight": True, "weight": 101, "share": 1}
    resp = client.patch("/api/v1/tenants/heavy", json=body, headers=admin_h)
    assert resp.status_code == 400 and resp.mimetype == "application/json"
    error = resp.json["error"]
    assert set(error["fields"]) == set(body)
    assert all(name in error["message"] for name in body), error["message"]
    for not_an_object in ([1], "weight", None):
        resp = client.patch("/api/v1/tenants/heavy", json=not_an_object, headers=admin_h)
        assert resp.status_code == 400 and "error" in resp.json, not_an_object
    assert client.get("/api/v1/tenants/heavy", headers=admin_h).json == before
