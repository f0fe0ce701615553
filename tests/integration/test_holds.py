"""Legal holds against real PostgreSQL: a held event keeps its body and its day across a
real partition drop while its unheld neighbour goes; releasing the hold lets the next
round drop it; a tenant-wide hold takes two operators to release; every step is audited."""

from __future__ import annotations

import datetime as dt

from click.testing import CliRunner
from sqlalchemy import Engine, text

from inbox.cli import main
from inbox.domain import ledger
from inbox.domain.idempotency import business_key_digest
from inbox.infra.config import Settings
from inbox.store.reads import holds as holds_reads
from inbox.store.schema import partitions
from inbox.store.schema.tables import PARTITIONED
from inbox.store.write import holds
from inbox.store.write import tokens as tstore
from inbox.store.write.retention import prune_once
from tests.integration.ledger_support import put_delivery, put_event
from tests.integration.test_partitions import add_day, exists, today
from tests.integration.ui_support import CSRF, grab, new_token, sign_in


def cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def token(engine: Engine, name: str, role: str = "operator", tenant: str | None = None):
    with engine.begin() as conn:
        _, secret = tstore.create_token(conn, name, role, tenant)
    return {"Authorization": f"Bearer {secret}"}


def old_event(engine: Engine, made_days: list[dt.date], day: dt.date, src, n: int = 1) -> str:
    """A finished event of ``day`` (its partitions made), received that day: its public id."""
    add_day(engine, made_days, day, src, n)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE events SET received_at = :at WHERE id = :id"),
            {"at": dt.datetime.combine(day, dt.time(12), dt.UTC), "id": ledger.make_id(day, n)},
        )
        return str(
            conn.execute(
                text("SELECT public_id FROM events WHERE id = :id"), {"id": ledger.make_id(day, n)}
            ).scalar_one()
        )


def body_of(engine: Engine, event_id: int) -> bytes | None:
    with engine.connect() as conn:
        body = conn.execute(text("SELECT body FROM events WHERE id = :i"), {"i": event_id}).scalar()
    return None if body is None else bytes(body)


def audit(engine: Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT actor, action FROM audit_log WHERE subject_kind = 'legal_hold' ORDER BY id"
            )
        )
        return [(r.actor, r.action) for r in rows]


def test_a_held_event_keeps_its_day_and_body_across_a_partition_drop(
    engine, make_source, made_days
):
    src = make_source(tenant="acme", name="hooks")
    held_day = today(engine) - dt.timedelta(days=400)
    free_day = held_day - dt.timedelta(days=1)
    held_evt = old_event(engine, made_days, held_day, src)
    old_event(engine, made_days, free_day, src)

    placed = cli(
        "holds", "place", "--tenant", "acme", "--event", held_evt,
        "--reason", "matter 2026-17", "--actor", "alice",
    )  # fmt: skip
    [hold_id] = [line.split()[1] for line in placed.splitlines() if line.startswith("id ")]

    listed = cli("partitions")
    lines = {line.split()[0]: line for line in listed.splitlines()[1:]}
    assert lines[str(held_day)].endswith(f"kept: legal hold {hold_id} (1 held event(s))")
    assert lines[str(free_day)].endswith("dropped by the next prune")

    result = prune_once(engine, Settings())
    assert result.days_dropped == [str(free_day)]
    assert result.days_kept == [f"{held_day}: legal hold {hold_id} (1 held event(s))"]
    assert result.bodies_removed == 1 and result.bodies_held == 1
    assert body_of(engine, ledger.make_id(held_day, 1)) == b"{}"
    for t in PARTITIONED:
        assert exists(engine, ledger.partition_name(t, held_day)), t
        assert not exists(engine, ledger.partition_name(t, free_day)), t

    again = cli("prune")  # while the hold stands, every round keeps it
    assert f"day kept          {held_day}: legal hold {hold_id}" in again
    assert "bodies            kept 1 under legal hold" in again

    released = cli("holds", "release", hold_id, "--actor", "bob")  # one operator suffices
    assert "status                released" in released, released
    result = prune_once(engine, Settings())
    assert result.days_dropped == [str(held_day)]
    assert result.bodies_removed == 1 and result.bodies_held == 0
    assert not exists(engine, ledger.partition_name("events", held_day))
    assert audit(engine) == [("alice", "hold_placed"), ("bob", "hold_released")]


def test_a_tenant_hold_takes_two_operators_to_release(engine, make_source, made_days, client):
    src = make_source(tenant="acme")
    day = today(engine) - dt.timedelta(days=400)
    old_event(engine, made_days, day, src)
    alice, bob = token(engine, "alice"), token(engine, "bob")
    other = token(engine, "mallory", tenant=make_source().tenant)

    resp = client.post(
        "/api/v1/holds", json={"tenant": "acme", "reason": "regulator request"}, headers=other
    )
    assert resp.status_code == 404, resp.json  # another tenant's token sees no acme
    resp = client.post(
        "/api/v1/holds", json={"tenant": "acme", "reason": "x", "v": 1}, headers=alice
    )
    assert resp.status_code == 400 and "Unknown field" in resp.json["error"]["message"]
    resp = client.post(
        "/api/v1/holds", json={"tenant": "acme", "reason": "regulator request"}, headers=alice
    )
    assert resp.status_code == 201, resp.json
    hold_id = resp.json["id"]
    assert resp.json["scope"] == "tenant" and resp.json["placed_by"] == "alice"

    asked = client.post(f"/api/v1/holds/{hold_id}/release", headers=alice)
    assert asked.status_code == 200 and asked.json["status"] == "release requested"
    alone = client.post(f"/api/v1/holds/{hold_id}/release", headers=alice)
    assert alone.status_code == 403, alone.json
    assert "different operator" in alone.json["error"]["message"]
    # still in force: the day and the body stay
    result = prune_once(engine, Settings())
    assert result.days_dropped == [] and result.bodies_held == 1
    assert [h["id"] for h in client.get("/api/v1/holds", headers=bob).json["data"]] == [hold_id]
    assert client.get("/api/v1/holds", headers=other).json["data"] == []

    done = client.post(f"/api/v1/holds/{hold_id}/release", headers=bob)
    assert done.status_code == 200 and done.json["status"] == "released"
    assert done.json["release_requested_by"] == "alice" and done.json["released_by"] == "bob"
    twice = client.post(f"/api/v1/holds/{hold_id}/release", headers=bob)
    assert twice.status_code == 409
    assert prune_once(engine, Settings()).days_dropped == [str(day)]
    assert audit(engine) == [
        ("alice", "hold_placed"),
        ("alice", "hold_release_requested"),
        ("bob", "hold_released"),
    ]
    with engine.connect() as conn:
        detail = conn.execute(
            text("SELECT detail FROM audit_log WHERE action = 'hold_released'")
        ).scalar_one()
    assert detail["requested_by"] == "alice" and detail["reason"] == "regulator request"


def test_the_cli_refuses_a_lone_release_of_a_tenant_hold(engine, make_source):
    make_source(tenant="acme")
    with engine.begin() as conn:
        hold = holds.place(conn, "acme", "alice", "case 9")
    cli("holds", "release", hold.public_id, "--actor", "alice")
    lone = CliRunner().invoke(main, ["holds", "release", hold.public_id, "--actor", "alice"])
    assert lone.exit_code == 1 and "different operator" in lone.output
    cli("holds", "release", hold.public_id, "--withdraw", "--actor", "carol")
    with engine.connect() as conn:
        assert holds_reads.get(conn, hold.public_id).status == "active"  # type: ignore[union-attr]


def test_source_and_business_key_holds_keep_only_what_they_cover(engine, make_source, made_days):
    src = make_source(tenant="acme", name="hooks")
    other = make_source(tenant="acme", name="other")
    day = today(engine) - dt.timedelta(days=400)
    # 1: other source, business key case-7 (held by key); 2: other source (not held);
    # 3: hooks (held by source)
    add_day(engine, made_days, day, other, 1)
    with engine.begin() as conn:
        put_event(conn, day, 2, other, "completed")
        put_event(conn, day, 3, src, "completed")
        conn.execute(text("UPDATE events SET received_at = now() - interval '400 days'"))
        conn.execute(
            text("UPDATE events SET business_key_digest = :bk WHERE id = :id"),
            {"bk": business_key_digest(src.tenant_id, ["case-7"]), "id": ledger.make_id(day, 1)},
        )
    cli("holds", "place", "--source", "acme/hooks", "--reason", "r", "--actor", "a")
    cli("holds", "place", "--tenant", "acme", "--business-key", "case-7", "--reason", "r")
    out = cli("holds", "list")
    assert "acme/hooks" in out and "acme: a business key" in out

    result = prune_once(engine, Settings())
    assert result.bodies_removed == 1 and result.bodies_held == 2
    assert body_of(engine, ledger.make_id(day, 2)) is None
    assert body_of(engine, ledger.make_id(day, 1)) == b"{}"
    assert body_of(engine, ledger.make_id(day, 3)) == b"{}"
    assert result.days_dropped == []
    [kept] = result.days_kept
    assert kept.endswith("(2 held event(s))") and kept.count("hold_") == 2, kept


def test_a_hold_names_something_that_exists(engine, make_source):
    make_source(tenant="acme")
    bad = CliRunner().invoke(
        main, ["holds", "place", "--tenant", "acme", "--event", "nope", "--reason", "r"]
    )
    assert bad.exit_code == 1 and "No event 'nope'" in bad.output, bad.output
    bad = CliRunner().invoke(main, ["holds", "place", "--tenant", "nobody", "--reason", "r"])
    assert bad.exit_code == 1 and "No tenant" in bad.output
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM legal_holds")).scalar() == 0


def test_the_console_places_and_releases_with_two_operators(client, app, engine, make_source):
    make_source(tenant="acme")
    alice = new_token(engine, "alice", "operator")
    bob = new_token(engine, "bob", "operator")
    sign_in(client, alice)
    page = client.get("/ui/holds").get_data(as_text=True)
    assert 'id="no-holds"' in page and 'id="place-hold"' in page
    placed = client.post(
        "/ui/holds",
        data={"csrf": grab(CSRF, page), "tenant": "acme", "subject": "tenant", "reason": "m-1"},
    )
    assert placed.status_code == 302
    with engine.connect() as conn:
        [hold] = holds_reads.listing(conn)
    page = client.get("/ui/holds").get_data(as_text=True)
    assert f'data-hold="{hold.public_id}"' in page and "Ask to release" in page
    url = f"/ui/holds/{hold.public_id}/release"
    assert client.post(url, data={"csrf": grab(CSRF, page)}).status_code == 302
    page = client.get("/ui/holds").get_data(as_text=True)
    assert 'data-field="own-request"' in page and 'data-action="release"' not in page
    assert client.post(url, data={"csrf": grab(CSRF, page)}).status_code == 403

    second = app.test_client()
    sign_in(second, bob)
    page = second.get("/ui/holds").get_data(as_text=True)
    assert "Confirm release" in page
    assert second.post(url, data={"csrf": grab(CSRF, page)}).status_code == 302
    with engine.connect() as conn:
        done = holds_reads.get(conn, hold.public_id)
    assert done is not None and done.status == "released" and done.released_by == "bob"
    assert audit(engine) == [
        ("alice", "hold_placed"),
        ("alice", "hold_release_requested"),
        ("bob", "hold_released"),
    ]


def test_the_day_of_a_held_events_delivery_is_kept_too(engine, make_source, made_days):
    src = make_source(tenant="acme")
    event_day = today(engine) - dt.timedelta(days=401)
    delivery_day = event_day + dt.timedelta(days=1)
    evt = old_event(engine, made_days, event_day, src)
    made_days.append(delivery_day)
    with engine.begin() as conn:
        partitions.make_day(conn, delivery_day)
        put_delivery(conn, delivery_day, 9, src, ledger.make_id(event_day, 1), "delivered")
        hold = holds.place(conn, "acme", "alice", "m-2", event=evt)
    result = prune_once(engine, Settings())
    assert result.days_dropped == []
    assert f"{delivery_day}: legal hold {hold.public_id} (1 held event(s))" in result.days_kept
    assert exists(engine, ledger.partition_name("delivery_attempts", delivery_day))
    with engine.begin() as conn:
        holds.release(conn, hold.public_id, "bob")
    dropped = prune_once(engine, Settings()).days_dropped
    assert sorted(dropped) == [str(event_day), str(delivery_day)]
