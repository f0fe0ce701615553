"""``/readyz`` tells the truth: the schema and the broker, not only a database ping; and
a receiver's 503 names its cause class."""

from __future__ import annotations

import os
import socket
from dataclasses import replace

from inbox.infra import keyring
from inbox.infra.config import Settings
from inbox.store.db.engine import make_engine
from inbox.store.schema import migrate
from tests.helpers import body_of, hmac_headers
from web import create_app


def ready(settings: Settings) -> tuple[int, dict]:
    engine = make_engine(settings)
    try:
        app = create_app(settings, engine=engine, doorbell=lambda: None)
        resp = app.test_client().get("/readyz")
        return resp.status_code, resp.json
    finally:
        engine.dispose()


def test_a_database_without_migrations_is_not_ready(empty_db):
    status, body = ready(Settings(database_url=empty_db))
    assert status == 503
    assert body["cause"] == "schema" and body["checks"]["database"] == "ok"
    assert "inbox migrate" in body["checks"]["schema"]


def test_a_schema_behind_the_code_is_not_ready_until_migrated(empty_db):
    migrate.upgrade(empty_db, "0001")
    status, body = ready(Settings(database_url=empty_db))
    assert status == 503 and body["cause"] == "schema"
    assert body["checks"]["schema"].startswith("at 0001, the code needs")
    migrate.upgrade(empty_db)
    status, body = ready(Settings(database_url=empty_db))
    assert status == 200 and body["checks"]["schema"] == "ok", body


def test_an_unreachable_broker_is_the_cause(settings, engine):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = f"redis://127.0.0.1:{port}/0"
    status, body = ready(replace(settings, redis_url=down, broker_url=down))
    assert status == 503 and body["cause"] == "broker"
    assert body["checks"]["database"] == "ok" and body["checks"]["schema"] == "ok"


def test_a_database_that_is_down_is_the_cause():
    status, body = ready(
        Settings(database_url="postgresql://postgres@127.0.0.1:1/none", db_timeout_ms=500)
    )
    assert status == 503 and body["cause"] == "database"


def test_the_receivers_503_names_the_schema_as_its_cause(empty_db, make_source):
    src = make_source()  # a source in the test database; this receiver's has no tables
    s = Settings(database_url=empty_db)
    engine = make_engine(s)
    try:
        client = create_app(s, engine=engine, doorbell=lambda: None).test_client()
        body = body_of({"a": 1})
        resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k"))
    finally:
        engine.dispose()
    assert resp.status_code == 503 and "Retry-After" in resp.headers
    assert resp.json["error"]["code"] == "unavailable"
    assert resp.json["error"]["cause"] == "schema"
    assert "inbox migrate" in resp.json["error"]["message"]


def test_the_receivers_503_names_the_database_when_it_is_down(make_source):
    src = make_source()
    s = Settings(database_url="postgresql://postgres@127.0.0.1:1/none", db_timeout_ms=500)
    engine = make_engine(s)
    try:
        client = create_app(s, engine=engine, doorbell=lambda: None).test_client()
        body = body_of({"a": 1})
        resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k"))
    finally:
        engine.dispose()
    assert resp.status_code == 503 and resp.json["error"]["cause"] == "database"


def test_secrets_the_key_cannot_read_are_the_cause(settings, make_source, monkeypatch):
    make_source()  # a stored, encrypted signing secret
    status, body = ready(settings)
    assert status == 200 and body["checks"]["secrets"] == "ok", body
    monkeypatch.setenv("INBOX_KEK", keyring.new_key())  # not the key they were stored with
    status, body = ready(settings)
    assert status == 503 and body["cause"] == "secrets"
    assert body["checks"]["secrets"].startswith("the newest signing secret does not decrypt")
    monkeypatch.delenv("INBOX_KEK")
    status, body = ready(settings)
    assert status == 503 and body["cause"] == "secrets"
    assert body["checks"]["secrets"].startswith("INBOX_KEK is not set")


def test_a_source_whose_playbook_is_missing_is_named_but_not_a_cause(settings, make_source):
    src = make_source(playbook="nowhere-registered")
    make_source(playbook="record")
    status, body = ready(settings)
    assert status == 200, body
    assert body["checks"]["playbooks"].startswith(
        f"not registered: {src.tenant}/{src.name} names 'nowhere-registered'"
    )


def test_the_key_store_unset_or_down_is_the_cause_once_payload_keys_exist(
    settings, make_source, engine, monkeypatch
):
    from sqlalchemy import text

    from inbox.store.db import keystore, sealing

    src = make_source()
    status, body = ready(settings)
    assert status == 200 and body["checks"]["keystore"] == "ok", body
    live_store = os.environ["INBOX_KEYSTORE_URL"]
    monkeypatch.delenv("INBOX_KEYSTORE_URL")  # no key yet: nothing to open, not a cause
    status, body = ready(settings)
    assert status == 200 and body["checks"]["keystore"] == "not configured", body

    monkeypatch.setenv("INBOX_KEYSTORE_URL", live_store)
    key = sealing.PayloadKeys(engine, size=4, ttl_s=60, enabled=True).key_for(src.tenant_id, None)
    monkeypatch.delenv("INBOX_KEYSTORE_URL")
    status, body = ready(settings)
    assert status == 503 and body["cause"] == "keystore"
    assert body["checks"]["keystore"].startswith("INBOX_KEYSTORE_URL is not set, yet 1 payload")

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"postgresql://postgres@127.0.0.1:{s.getsockname()[1]}/keys"
    monkeypatch.setenv("INBOX_KEYSTORE_URL", dead)
    status, body = ready(settings)
    assert status == 503 and body["cause"] == "keystore"
    assert body["checks"]["keystore"].startswith("unreachable"), body
    monkeypatch.setenv("INBOX_KEYSTORE_URL", live_store)
    keystore.current().destroy([key.id])
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM data_keys"))


def test_a_process_without_a_key_store_says_payloads_go_in_clear(settings, caplog):
    from inbox.services import startup

    startup.check(replace(settings, keystore_url="", encrypt_payloads=True))
    assert "INBOX_KEYSTORE_URL is not set: new payloads are stored in clear" in caplog.text
    caplog.clear()
    startup.check(replace(settings, keystore_url="postgresql://x/keys", encrypt_payloads=True))
    assert "INBOX_KEYSTORE_URL" not in caplog.text
