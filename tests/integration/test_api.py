"""The admin API (/api/v1): bearer tokens, tenant scoping, listings, details, replays."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from inbox.domain import callbacks
from inbox.domain import tokens as tokenfmt
from inbox.store.reads import tokens as treads
from inbox.store.write import endpoints as estore
from inbox.store.write import tokens as tstore
from tests.helpers import body_of, hmac_headers

Headers = dict[str, str]


def make_token(engine, name: str, role: str, tenant: str | None = None) -> Headers:
    with engine.begin() as conn:
        _, secret = tstore.create_token(conn, name, role, tenant)
    return {"Authorization": f"Bearer {secret}"}


def quarantine(engine, src, n: int, prefix: str, state: str = "quarantined") -> list[str]:
    """Insert n events for a source directly (cheaper than ingesting them)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO events (public_id, tenant_id, source_id, content_type, body,"
                " body_sha256, response_status, response_body, state, event_type,"
                " last_error_class)"
                " SELECT :p || g, :t, :s, 'application/json', '{}', '\\x00', 202, '', :state,"
                " 'sim.swap', 'ValueError' FROM generate_series(1, :n) g"
            ),
            {"p": prefix, "t": src.tenant_id, "s": src.id, "n": n, "state": state},
        )
    return [f"{prefix}{i}" for i in range(1, n + 1)]


def audit_count(engine, action: str = "replay") -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM audit_log WHERE action = :a"), {"a": action}
            ).scalar_one()
        )


@pytest.fixture
def world(engine, make_source) -> dict[str, Any]:
    """Tenants A and B, quarantined events in each, and four tokens."""
    a, b = make_source(tenant="ta", name="billing"), make_source(tenant="tb", name="billing")
    return {
        "a": a,
        "b": b,
        "a_events": quarantine(engine, a, 3, "evt_a"),
        "b_events": quarantine(engine, b, 2, "evt_b"),
        "op": make_token(engine, "ops", "operator"),
        "viewer": make_token(engine, "watcher", "viewer"),
        "op_a": make_token(engine, "ops-a", "operator", "ta"),
        "viewer_a": make_token(engine, "watcher-a", "viewer", "ta"),
    }


def state_of(engine, public_id: str) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(
                text("SELECT state FROM events WHERE public_id = :p"), {"p": public_id}
            ).scalar_one()
        )


# --- authentication and authorisation -------------------------------------------------


@pytest.mark.parametrize(
    "auth",
    [None, "Bearer", "Basic dXNlcjpwYXNz", "Bearer inb_" + "x" * 43, "Bearer not-a-token"],
)
def test_401_without_a_valid_token_and_nothing_changes(client, engine, world, auth):
    headers = {"Authorization": auth} if auth else {}
    for method, path in [
        ("get", "/api/v1/events"),
        ("get", f"/api/v1/events/{world['a_events'][0]}"),
        ("post", f"/api/v1/events/{world['a_events'][0]}/replay"),
        ("post", "/api/v1/replays"),
    ]:
        resp = getattr(client, method)(path, headers=headers, json={"kind": "events"})
        assert resp.status_code == 401, (method, path)
        assert resp.json["error"]["code"] == "unauthorized"
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert state_of(engine, world["a_events"][0]) == "quarantined"
    assert audit_count(engine) == 0
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM bulk_replays")).scalar_one() == 0


def test_a_revoked_token_gets_401_at_once(client, engine, world):
    assert client.get("/api/v1/events", headers=world["op"]).status_code == 200
    with engine.begin() as conn:
        assert tstore.revoke(conn, "ops")
    resp = client.get("/api/v1/events", headers=world["op"])
    assert resp.status_code == 401 and resp.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_viewer_may_read_but_not_replay(client, engine, world):
    evt = world["a_events"][0]
    assert client.get(f"/api/v1/events/{evt}", headers=world["viewer"]).status_code == 200
    resp = client.post(f"/api/v1/events/{evt}/replay", headers=world["viewer"])
    assert resp.status_code == 403 and resp.json["error"]["code"] == "forbidden"
    resp = client.post("/api/v1/replays", headers=world["viewer"], json={"kind": "events"})
    assert resp.status_code == 403
    assert state_of(engine, evt) == "quarantined"
    assert audit_count(engine) == 0
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM bulk_replays")).scalar_one() == 0


def test_another_tenants_event_is_404_for_a_scoped_token(client, engine, world):
    theirs = world["b_events"][0]
    for headers in (world["viewer_a"], world["op_a"]):
        resp = client.get(f"/api/v1/events/{theirs}", headers=headers)
        assert resp.status_code == 404
        # The same answer as for an id that does not exist at all.
        missing = client.get("/api/v1/events/evt_nope", headers=headers)
        assert resp.json == missing.json
    resp = client.post(f"/api/v1/events/{theirs}/replay", headers=world["op_a"])
    assert resp.status_code == 404
    assert state_of(engine, theirs) == "quarantined" and audit_count(engine) == 0
    # The all-tenants operator sees it, and may replay it.
    shown = client.get(f"/api/v1/events/{theirs}", headers=world["op"])
    assert shown.status_code == 200 and shown.json["tenant"] == "tb"
    assert client.post(f"/api/v1/events/{theirs}/replay", headers=world["op"]).status_code == 200
    assert state_of(engine, theirs) == "received"


def test_lists_are_filtered_to_the_tokens_tenant(client, world):
    def ids(headers: Headers, query: str = "") -> set[str]:
        resp = client.get(f"/api/v1/events{query}", headers=headers)
        assert resp.status_code == 200
        return {e["public_id"] for e in resp.json["items"]}

    everything = set(world["a_events"]) | set(world["b_events"])
    assert ids(world["op"]) == everything
    assert ids(world["viewer_a"]) == set(world["a_events"])
    assert ids(world["viewer_a"], "?tenant=tb") == set()  # asking for B shows nothing
    assert ids(world["op"], "?tenant=tb") == set(world["b_events"])


def test_replaying_a_non_quarantined_event_is_409(client, engine, world, bell):
    evt = world["a_events"][0]
    assert client.post(f"/api/v1/events/{evt}/replay", headers=world["op_a"]).status_code == 200
    assert bell.rings == 1  # the workers hear of it at once
    resp = client.post(f"/api/v1/events/{evt}/replay", headers=world["op_a"])
    assert resp.status_code == 409 and resp.json["error"]["code"] == "not_replayable"
    assert bell.rings == 1
    with engine.connect() as conn:
        actors = conn.execute(text("SELECT actor FROM audit_log WHERE action = 'replay'")).all()
    assert [a.actor for a in actors] == ["ops-a"]


def test_last_used_is_recorded(client, engine, world):
    with engine.connect() as conn:
        before = {t.name: t.last_used_at for t in treads.list_tokens(conn)}
    assert before["watcher"] is None
    client.get("/api/v1/events", headers=world["viewer"])
    with engine.connect() as conn:
        after = {t.name: t.last_used_at for t in treads.list_tokens(conn)}
    assert after["watcher"] is not None and after["ops"] is None


# --- listings ------------------------------------------------------------------------------


def test_cursor_pagination_returns_every_event_once(client, engine, world):
    extra = quarantine(engine, world["a"], 20, "evt_more", state="completed")
    seen: list[str] = []
    cursor, pages = None, 0
    while True:
        query = "?limit=4" + (f"&cursor={cursor}" if cursor else "")
        resp = client.get(f"/api/v1/events{query}", headers=world["op"])
        assert resp.status_code == 200
        assert len(resp.json["items"]) <= 4
        seen += [e["public_id"] for e in resp.json["items"]]
        pages += 1
        cursor = resp.json["next_cursor"]
        if cursor is None:
            break
    everything = world["a_events"] + world["b_events"] + extra
    assert sorted(seen) == sorted(everything) and len(seen) == len(set(seen)) == 25
    assert pages == 7  # 25 events, 4 a page: the last page says there is no more


def test_listing_filters(client, engine, world):
    quarantine(engine, world["a"], 2, "evt_done", state="completed")

    def count(query: str) -> int:
        resp = client.get(f"/api/v1/events?{query}", headers=world["op"])
        assert resp.status_code == 200, resp.json
        return len(resp.json["items"])

    assert count("state=quarantined") == 5
    assert count("state=completed&tenant=ta") == 2
    assert count("source=billing&tenant=tb") == 2
    assert count("type=sim.swap") == 7 and count("type=other") == 0
    assert count("since=2000-01-01T00:00:00Z") == 7 and count("until=2000-01-01") == 0
    for bad in ("state=nope", "limit=0", "limit=x", "cursor=%%%", "since=yesterday"):
        resp = client.get(f"/api/v1/events?{bad}", headers=world["op"])
        assert resp.status_code == 400 and "error" in resp.json, bad


# --- details ------------------------------------------------------------------------------


def test_event_detail_has_steps_conflicts_duplicates_deliveries_and_audit(
    client, engine, make_source
):
    src = make_source(tenant="acme", name="billing", event_type_path="type")
    op = make_token(engine, "ops", "operator")
    body = body_of({"type": "sim.swap", "account": "acct-42"})
    public_id = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k1")).json[
        "id"
    ]
    assert client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k1")).status_code
    other = body_of({"type": "sim.swap", "account": "acct-43"})
    assert (
        client.post(src.path, data=other, headers=hmac_headers("s3cret", other, "k1")).status_code
        == 422
    )
    with engine.begin() as conn:
        ev_id = conn.execute(
            text("SELECT id FROM events WHERE public_id = :p"), {"p": public_id}
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO steps (event_id, name, result, attempt)"
                " VALUES (:e, 'lookup', '{\"account\": \"acct-42\"}', 1)"
            ),
            {"e": ev_id},
        )
        conn.execute(
            text(
                "UPDATE events SET state = 'quarantined', last_error_class = 'Boom',"
                " last_error_message = 'down', attempts = 5 WHERE id = :e"
            ),
            {"e": ev_id},
        )
        ep = estore.create_endpoint(conn, "acme", "https://example.test/cb", callbacks.new_secret())
        d_id = conn.execute(
            text(
                "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type,"
                " body, state, attempts, last_status) VALUES ('msg_1', :t, :ep, :e, 'sim.swap',"
                " '{}', 'failed', 1, 500) RETURNING id"
            ),
            {"t": src.tenant_id, "ep": ep.id, "e": ev_id},
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO delivery_attempts (delivery_id, status, latency_ms, excerpt)"
                " VALUES (:d, 500, 12, 'oops')"
            ),
            {"d": d_id},
        )
    assert client.post(f"/api/v1/events/{public_id}/replay", headers=op).status_code == 200
    detail = client.get(f"/api/v1/events/{public_id}", headers=op).json
    assert detail["public_id"] == public_id and detail["state"] == "received"
    assert detail["body"] == body.decode() and "x-signature" not in detail["headers"]
    assert detail["duplicate_count"] == 1
    assert detail["first_duplicate_at"] and detail["last_duplicate_at"]
    assert len(detail["conflicts"]) == 1 and detail["conflicts"][0]["count"] == 1
    assert [s["name"] for s in detail["steps"]] == ["lookup"]
    assert detail["steps"][0]["result"] == {"account": "acct-42"}
    assert [a["actor"] for a in detail["audit"]] == ["ops"]
    assert detail["audit"][0]["action"] == "replay"
    assert re.match(r"\d{4}-\d\d-\d\dT", detail["received_at"])  # ISO 8601 times
    (delivery,) = detail["deliveries"]
    assert delivery["public_id"] == "msg_1" and delivery["state"] == "failed"
    assert [a["status"] for a in delivery["attempts_log"]] == [500]
    assert "id" not in detail and "tenant_id" not in detail and "fence" not in detail
    assert "s3cret" not in str(detail)
    # the shape is pinned: a field is added or removed on purpose, not by a refactoring
    assert sorted(detail) == sorted(EVENT_DETAIL_KEYS)
    assert sorted(delivery) == sorted((*DELIVERY_KEYS, "attempts_log", "audit"))
    assert sorted(delivery["attempts_log"][0]) == [
        "at",
        "error_class",
        "excerpt",
        "latency_ms",
        "status",
    ]
    assert sorted(detail["steps"][0]) == ["attempt", "completed_at", "name", "replay", "result"]
    assert sorted(detail["conflicts"][0]) == ["count", "first_at", "last_at", "other_sha256"]
    assert sorted(detail["audit"][0]) == ["action", "actor", "at", "detail"]
    (listed,) = client.get("/api/v1/events?tenant=acme", headers=op).json["items"]
    assert sorted(listed) == sorted(EVENT_LIST_KEYS)
    (listed,) = client.get("/api/v1/deliveries?tenant=acme", headers=op).json["items"]
    assert sorted(listed) == sorted((*DELIVERY_KEYS, "event"))
    assert listed["event"] == public_id
    shown = client.get("/api/v1/deliveries/msg_1", headers=op).json
    assert sorted(shown) == sorted((*DELIVERY_KEYS, "attempts_log", "audit"))


EVENT_LIST_KEYS = (
    "public_id", "tenant", "source", "event_type", "state", "attempts", "replay", "received_at",
    "finished_at", "outcome", "last_error_class", "duplicate_count",
)  # fmt: skip
EVENT_DETAIL_KEYS = (
    "public_id", "tenant", "source", "event_type", "content_type", "body", "body_sha256",
    "headers", "verification", "response_status", "sync", "state", "attempts", "max_attempts",
    "replay", "available_at", "lease_owner", "lease_expires_at", "received_at", "finished_at",
    "last_error_class", "last_error_message", "duplicate_count", "first_duplicate_at",
    "last_duplicate_at", "outcome", "decision", "duplicate_of", "occurred_at", "version",
    "newer_event", "trace_id", "trace_context", "held_reason", "filter_reason", "steps",
    "conflicts", "audit", "deliveries", "lane", "sealed", "erased",
)  # fmt: skip
DELIVERY_KEYS = (
    "public_id", "tenant", "endpoint", "url", "event_type", "state", "replay", "attempts",
    "last_status", "last_error", "created_at", "finished_at",
)  # fmt: skip


# --- deliveries ---------------------------------------------------------------------------


@pytest.fixture
def failed_deliveries(engine, world) -> Callable[[str, int], list[str]]:
    def make(tenant: str, n: int) -> list[str]:
        src = world["a" if tenant == "ta" else "b"]
        with engine.begin() as conn:
            ep = estore.create_endpoint(conn, tenant, "https://example.test/", "whsec_x")
            conn.execute(
                text(
                    "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_type, body,"
                    " state, attempts, last_error)"
                    " SELECT :p || g, :t, :ep, 'sim.swap', '{}', 'failed', 4, 'HTTP 500'"
                    " FROM generate_series(1, :n) g"
                ),
                {"p": f"msg_{tenant}_", "t": src.tenant_id, "ep": ep.id, "n": n},
            )
        return [f"msg_{tenant}_{i}" for i in range(1, n + 1)]

    return make


def test_deliveries_list_show_and_replay_ring_the_couriers(
    client, app, engine, world, failed_deliveries
):
    mine, theirs = failed_deliveries("ta", 3), failed_deliveries("tb", 1)
    rung: list[set[int]] = []
    app.extensions["inbox"].ring_couriers = rung.append
    listed = client.get("/api/v1/deliveries?state=failed", headers=world["viewer_a"]).json
    assert {d["public_id"] for d in listed["items"]} == set(mine)
    assert client.get(f"/api/v1/deliveries/{theirs[0]}", headers=world["op_a"]).status_code == 404
    shown = client.get(f"/api/v1/deliveries/{mine[0]}", headers=world["viewer_a"])
    assert shown.status_code == 200 and shown.json["attempts_log"] == []
    assert (
        client.post(f"/api/v1/deliveries/{mine[0]}/replay", headers=world["viewer_a"]).status_code
        == 403
    )
    assert (
        client.post(f"/api/v1/deliveries/{theirs[0]}/replay", headers=world["op_a"]).status_code
        == 404
    )
    assert rung == []
    resp = client.post(f"/api/v1/deliveries/{mine[0]}/replay", headers=world["op_a"])
    assert resp.status_code == 200 and resp.json["state"] == "pending"
    assert len(rung) == 1 and len(rung[0]) == 1
    again = client.post(f"/api/v1/deliveries/{mine[0]}/replay", headers=world["op_a"])
    assert again.status_code == 409 and len(rung) == 1
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT public_id, state, attempts FROM deliveries ORDER BY id")
        ).all()
        audit = conn.execute(
            text("SELECT actor FROM audit_log WHERE subject_kind = 'delivery'")
        ).all()
    assert [(r.public_id, r.state) for r in rows if r.state != "failed"] == [(mine[0], "pending")]
    assert [a.actor for a in audit] == ["ops-a"]


# --- the document and the CLI ---------------------------------------------------------------


def test_openapi_describes_every_route(client, app):
    doc = client.get("/api/v1/openapi.json").json  # needs no token
    assert doc["openapi"].startswith("3.1")
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert "Error" in doc["components"]["schemas"]
    rules = [r for r in app.url_map.iter_rules() if r.rule.startswith("/api/v1")]
    assert len(rules) >= 10
    for rule in rules:
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        assert path in doc["paths"], f"{rule.rule} is not in the OpenAPI document"
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            assert method.lower() in doc["paths"][path], f"{method} {rule.rule} undocumented"
            op = doc["paths"][path][method.lower()]
            for name in rule.arguments:
                assert any(p["name"] == name and p["in"] == "path" for p in op["parameters"])
    for item in doc["paths"].values():
        for op in item.values():
            for ref in re.findall(r"#/components/(\w+)/(\w+)", str(op)):
                assert ref[1] in doc["components"][ref[0]], ref


def test_tokens_cli_create_list_revoke(database_url, engine, make_source, client):
    make_source(tenant="acme")
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    out = run("tokens", "create", "--name", "ci", "--role", "viewer", "--tenant", "acme")
    secret = out.strip().splitlines()[-1]
    assert tokenfmt.well_formed(secret)
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT token_digest, role FROM api_tokens")).one()
    assert bytes(stored.token_digest) == tokenfmt.digest(secret) and stored.role == "viewer"
    with engine.connect() as conn:  # the clear token is nowhere in the table
        dump = conn.execute(text("SELECT api_tokens::text FROM api_tokens")).scalar_one()
    assert secret not in dump
    headers = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/v1/events", headers=headers).status_code == 200
    listed = run("tokens", "list")
    assert "ci" in listed and "viewer" in listed and "acme" in listed and secret not in listed
    assert "revoked" in run("tokens", "revoke", "ci")
    assert client.get("/api/v1/events", headers=headers).status_code == 401
    failed = runner.invoke(main, ["tokens", "revoke", "ci"])
    assert failed.exit_code != 0
