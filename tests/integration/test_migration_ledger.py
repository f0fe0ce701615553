"""Migration 0012 (the partitioned ledger) on a database at 0011 that holds events,
deliveries and attempts in every state: every row and reference is kept, and the app
works on the result; then back down to 0011 with every row still there."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, text

from inbox.domain import ledger
from inbox.domain.idempotency import key_digest
from inbox.domain.records import Source
from inbox.domain.sources import SourceOptions
from inbox.domain.states import DeliveryState, EventState
from inbox.infra.config import Settings
from inbox.store.db.engine import make_engine, sqlalchemy_url
from inbox.store.schema import migrate
from inbox.store.schema.partitions import today
from inbox.store.schema.tables import PARTITIONED
from inbox.store.write import sources as sstore
from inbox.store.write import tokens as tstore
from tests.helpers import EVENTS, body_of, hmac_headers
from web import create_app

# The states the schema before the ledger knew (``filtered`` came after it, with 0021).
BEFORE_LEDGER = [s for s in EventState if s is not EventState.FILTERED]

NOW = dt.datetime.now(dt.UTC)
# The delivery states the schema had before 0012 (``held`` came with 0023).
DELIVERY_STATES_THEN = tuple(s for s in DeliveryState if s != DeliveryState.HELD)
AGES = (dt.timedelta(days=3), dt.timedelta(days=1), dt.timedelta(0))  # three days present
TERMINAL = {"completed", "quarantined"}


def _event(conn: Connection, src: Source, n: int, state: str, age: dt.timedelta) -> dict[str, Any]:
    body = body_of({"n": n})
    key = f"key-{n}"
    row = {
        "p": f"evt_{n:024x}",  # the old form: 24 hex digits, no day
        "t": src.tenant_id,
        "s": src.id,
        "kd": key_digest(src.tenant_id, src.id, key),
        "ke": NOW + dt.timedelta(days=1),
        "body": body,
        "sha": hashlib.sha256(body).digest(),
        "resp": json.dumps({"id": f"evt_{n:024x}", "status": "accepted"}).encode(),
        "state": state,
        "received": NOW - age,
        "finished": NOW - age if state in TERMINAL else None,
        "dups": n,
    }
    row["id"] = conn.execute(
        text(
            "INSERT INTO events (public_id, tenant_id, source_id, key_digest, key_expires_at,"
            " content_type, body, body_sha256, response_status, response_body, state,"
            " received_at, finished_at, duplicate_count, first_duplicate_at,"
            " last_duplicate_at)"
            " VALUES (:p, :t, :s, :kd, :ke, 'application/json', :body, :sha, 202, :resp,"
            " :state, :received, :finished, :dups,"
            " CASE WHEN :dups > 0 THEN CAST(:received AS timestamptz) END,"
            " CASE WHEN :dups > 0 THEN CAST(:received AS timestamptz) END) RETURNING id"
        ),
        row,
    ).scalar_one()
    row["key"], row["payload"] = key, {"n": n}
    return row


def fill_0011(engine: Engine) -> dict[str, Any]:
    """Events in every state on three days, each with a step, an attempt and a conflict;
    deliveries in every state with attempts; effects, bulk replay items, audit rows."""
    with engine.begin() as conn:
        sstore.create_tenant(conn, "acme")
        src = sstore.create_source(conn, "acme", "hooks", "hmac", ["s3cret"], SourceOptions())
        evs = [
            _event(conn, src, n, state.value, AGES[n % 3])
            for n, state in enumerate(list(BEFORE_LEDGER) * 2)
        ]
        first, second = evs[0]["id"], evs[1]["id"]
        conn.execute(
            text("UPDATE events SET duplicate_of = :a, newer_event_id = :a WHERE id = :b"),
            {"a": first, "b": second},
        )
        for ev in evs:
            conn.execute(
                text("INSERT INTO steps (event_id, name, attempt) VALUES (:e, 'record', 1)"),
                {"e": ev["id"]},
            )
            conn.execute(
                text(
                    "INSERT INTO event_attempts (event_id, attempt, error_class, outcome)"
                    " VALUES (:e, 1, 'RuntimeError', 'retry')"
                ),
                {"e": ev["id"]},
            )
            conn.execute(
                text(
                    "INSERT INTO idempotency_conflicts (event_id, other_body_sha256)"
                    " VALUES (:e, 'other')"
                ),
                {"e": ev["id"]},
            )
        conn.execute(
            text(
                "INSERT INTO effects (tenant_id, name, business_key_digest, event_id)"
                " VALUES (:t, 'charge', 'bk', :e)"
            ),
            {"t": src.tenant_id, "e": first},
        )
        ep = conn.execute(
            text(
                "INSERT INTO endpoints (public_id, tenant_id, url)"
                " VALUES ('ep_1', :t, 'https://x.test') RETURNING id"
            ),
            {"t": src.tenant_id},
        ).scalar_one()
        dls = []
        for n, state in enumerate(DELIVERY_STATES_THEN):
            ev = evs[n]
            # on another day than its event, but never before it: a delivery is made
            # by a step that runs after its event is received (and reads rely on it)
            created = max(NOW - AGES[(n + 1) % 3], ev["received"])
            d = conn.execute(
                text(
                    "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id,"
                    " event_type, body, state, created_at) VALUES"
                    " (:p, :t, :ep, :e, 'x', '{}', :state, :c) RETURNING id"
                ),
                {
                    "p": f"msg_{n:024x}",
                    "t": src.tenant_id,
                    "ep": ep,
                    "e": ev["id"],
                    "state": state.value,
                    "c": created,
                },
            ).scalar_one()
            conn.execute(
                text("INSERT INTO delivery_attempts (delivery_id, latency_ms) VALUES (:d, 9)"),
                {"d": d},
            )
            dls.append({"id": d, "public_id": f"msg_{n:024x}", "created": created, "event": ev})
        for kind, subject in (("events", evs[3]), ("deliveries", dls[3])):
            job = conn.execute(
                text(
                    "INSERT INTO bulk_replays (public_id, kind, rate, actor, request_sha256)"
                    " VALUES (:p, :k, 10, 'op', 'x') RETURNING id"
                ),
                {"p": f"rpl_{kind}", "k": kind},
            ).scalar_one()
            conn.execute(
                text(
                    "INSERT INTO bulk_replay_items (job_id, subject_id, public_id)"
                    " VALUES (:j, :s, :p)"
                ),
                {"j": job, "s": subject["id"], "p": subject.get("public_id", subject.get("p"))},
            )
        for kind, subject in (("event", first), ("delivery", dls[0]["id"]), ("endpoint", ep)):
            conn.execute(
                text(
                    "INSERT INTO audit_log (actor, action, subject_kind, subject_id)"
                    " VALUES ('op', 'x', :k, :s)"
                ),
                {"k": kind, "s": subject},
            )
    return {"src": src, "events": evs, "deliveries": dls, "endpoint": ep}


def new_event_id(ev: dict[str, Any]) -> int:
    return ledger.make_id(ev["received"].date(), ev["id"])


def scalars(conn: Connection, sql: str, **params: Any) -> list[Any]:
    return [r[0] for r in conn.execute(text(sql), params)]


@pytest.fixture
def at_head(empty_db: str):
    migrate.upgrade(empty_db, "0011_console_sessions")
    engine = create_engine(sqlalchemy_url(empty_db))
    try:
        world = fill_0011(engine)
        migrate.upgrade(empty_db)
        yield empty_db, engine, world
    finally:
        engine.dispose()


def test_every_row_and_reference_is_kept(at_head):
    _url, engine, world = at_head
    evs, dls = world["events"], world["deliveries"]
    ids = {ev["p"]: new_event_id(ev) for ev in evs}
    with engine.connect() as conn:
        rows = {r.public_id: r for r in conn.execute(text(EVENTS))}
        assert set(rows) == set(ids)
        for ev in evs:
            r = rows[ev["p"]]
            assert r.id == ids[ev["p"]] and ledger.day_of(r.id) == ev["received"].date()
            assert (r.state, bytes(r.body), r.received_at) == (
                ev["state"],
                ev["body"],
                ev["received"],
            )
            assert bytes(r.key_digest) == ev["kd"] and r.key_expires_at == ev["ke"]
            assert r.duplicate_count == ev["dups"]  # read through the key's counters
        # the counters moved to the keys: one small row per live key
        keyed = conn.execute(text("SELECT event_id, duplicate_count FROM event_keys")).all()
        assert sorted(keyed) == sorted((ids[ev["p"]], ev["dups"]) for ev in evs)
        assert scalars(conn, "SELECT sum(duplicate_count) FROM events") == [0]
        first, second = ids[evs[0]["p"]], ids[evs[1]["p"]]
        assert conn.execute(
            text("SELECT duplicate_of, newer_event_id FROM events WHERE id = :i"), {"i": second}
        ).one() == (first, first)
        for table in ("steps", "event_attempts", "idempotency_conflicts"):
            assert sorted(scalars(conn, f"SELECT event_id FROM {table}")) == sorted(ids.values())
        assert scalars(conn, "SELECT event_id FROM effects") == [first]
        dids = {d["public_id"]: ledger.make_id(d["created"].date(), d["id"]) for d in dls}
        got = conn.execute(text("SELECT public_id, id, event_id, state FROM deliveries")).all()
        assert sorted(got) == sorted(
            (d["public_id"], dids[d["public_id"]], ids[d["event"]["p"]], state.value)
            for d, state in zip(dls, DELIVERY_STATES_THEN, strict=True)
        )
        assert sorted(scalars(conn, "SELECT delivery_id FROM delivery_attempts")) == sorted(
            dids.values()
        )
        items = conn.execute(
            text(
                "SELECT j.kind, i.subject_id FROM bulk_replay_items i"
                " JOIN bulk_replays j ON j.id = i.job_id ORDER BY j.kind"
            )
        ).all()
        assert items == [
            ("deliveries", dids[dls[3]["public_id"]]),
            ("events", ids[evs[3]["p"]]),
        ]
        audit = dict(conn.execute(text("SELECT subject_kind, subject_id FROM audit_log")).all())
        assert audit == {
            "event": first,
            "delivery": dids[dls[0]["public_id"]],
            "endpoint": world["endpoint"],  # not a ledger id: as it was
        }
        # a partition for every day present, and the week ahead, in every ledger table
        present = {ev["received"].date() for ev in evs} | {d["created"].date() for d in dls}
        ahead = {today(conn) + dt.timedelta(days=n) for n in range(8)}
        for table in PARTITIONED:
            for day in present | ahead:
                name = ledger.partition_name(table, day)
                assert conn.execute(text("SELECT to_regclass(:n)"), {"n": name}).scalar(), name
            assert scalars(conn, f"SELECT count(*) FROM {table}_default") == [0]


def test_the_app_works_on_the_migrated_ledger(at_head):
    url, _, world = at_head
    settings = Settings(database_url=url, pool_size=2)
    app_engine = make_engine(settings)
    try:
        client = create_app(
            settings, engine=app_engine, doorbell=lambda: None, route_cache_seconds=0
        ).test_client()
        src, ev = world["src"], world["events"][2]  # a completed event, its key migrated
        body = body_of(ev["payload"])
        resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, ev["key"]))
        assert resp.status_code == 202 and resp.headers["Idempotent-Replayed"] == "true"
        assert resp.data == ev["resp"]  # the first answer, replayed
        fresh = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "new"))
        assert fresh.status_code == 202 and "Idempotent-Replayed" not in fresh.headers
        new_id = fresh.get_json()["id"]
        assert ledger.day_of_public_id("evt_", new_id) is not None  # new ids carry their day
        with app_engine.begin() as conn:
            _, token = tstore.create_token(conn, "viewer", "viewer")
        auth = {"Authorization": f"Bearer {token}"}
        shown = client.get(f"/api/v1/events/{ev['p']}", headers=auth)  # the old public id
        assert shown.status_code == 200, shown.get_json()
        detail = shown.get_json()
        assert detail["state"] == ev["state"] and detail["duplicate_count"] == ev["dups"] + 1
        assert [d["public_id"] for d in detail["deliveries"]] == [
            world["deliveries"][2]["public_id"]
        ]
        assert client.get(f"/api/v1/events/{new_id}", headers=auth).status_code == 200
    finally:
        app_engine.dispose()


def test_the_downgrade_keeps_every_row(at_head):
    url, engine, world = at_head
    with engine.begin() as conn:  # a duplicate counted after the upgrade goes down too
        conn.execute(text("UPDATE event_keys SET duplicate_count = duplicate_count + 1"))
    migrate.downgrade(url, "0011_console_sessions")
    with engine.connect() as conn:
        rows = {
            r.public_id: r
            for r in conn.execute(
                text("SELECT public_id, key_digest, key_expires_at, duplicate_count FROM events")
            )
        }
        for ev in world["events"]:
            r = rows[ev["p"]]
            assert (bytes(r.key_digest), r.key_expires_at) == (ev["kd"], ev["ke"])
            assert r.duplicate_count == ev["dups"] + 1
        for table, n in (("steps", 8), ("event_attempts", 8), ("deliveries", 4)):
            assert scalars(conn, f"SELECT count(*) FROM {table}") == [n]
        assert scalars(conn, "SELECT count(*) FROM delivery_attempts") == [4]
        assert scalars(conn, "SELECT count(*) FROM idempotency_conflicts") == [8]
        assert scalars(conn, "SELECT count(*) FROM pg_proc WHERE proname = 'inbox_ledger_id'") == [
            0
        ]
