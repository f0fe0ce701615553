"""Signing secrets at rest: encrypted under INBOX_KEK, rotated by a command, never in a dump."""

from __future__ import annotations

import os
import subprocess

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from inbox.cli import main
from inbox.infra import keyring
from inbox.store.db.engine import sqlalchemy_url
from inbox.store.reads import endpoints as ereads
from inbox.store.reads import sources as sreads
from inbox.store.schema import migrate
from inbox.store.write import endpoints as estore
from inbox.store.write import sources as sstore
from tests.helpers import body_of, hmac_headers

CLEAR = "whsec_CLEARVALUE_0123456789"
ENDPOINT_CLEAR = "epsec_CLEARVALUE_9876543210"


def raw_secrets(engine) -> list[str]:
    with engine.connect() as conn:
        return [
            r[0]
            for r in conn.execute(
                text(
                    "SELECT secret FROM source_secrets"
                    " UNION ALL SELECT secret FROM endpoint_secrets"
                )
            )
        ]


def test_a_dump_of_the_tables_holds_no_secret_in_clear(make_source, engine, database_url):
    src = make_source(secrets_=(CLEAR,))
    with engine.begin() as conn:
        estore.create_endpoint(conn, src.tenant, "https://example.com/cb", ENDPOINT_CLEAR)
        sstore.add_secret(conn, src, CLEAR + "-next")
    stored = raw_secrets(engine)
    assert len(stored) == 3 and all(s.startswith("fernet:") for s in stored)
    dump = subprocess.run(
        ["pg_dump", "--data-only", "-t", "source_secrets", "-t", "endpoint_secrets", database_url],
        capture_output=True,
        check=True,
    ).stdout
    assert b"fernet:" in dump  # the rows are in the dump...
    assert b"CLEARVALUE" not in dump  # ...their values are not
    # Read back, they are what was stored; the receiver verifies with them.
    with engine.connect() as conn:
        assert set(sreads.get_source(conn, src.tenant, src.name).secrets) == {
            CLEAR,
            CLEAR + "-next",
        }


def test_the_database_refuses_a_clear_secret(make_source, engine):
    src = make_source()
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(
            text("INSERT INTO source_secrets (source_id, secret) VALUES (:s, 'plain')"),
            {"s": src.id},
        )


def test_rotation_new_key_first_then_reencrypt_then_drop_the_old(make_source, engine, monkeypatch):
    old = keyring.keyring()
    src = make_source(secrets_=(CLEAR,))
    with engine.begin() as conn:
        ep = estore.create_endpoint(conn, src.tenant, "https://example.com/cb", ENDPOINT_CLEAR)
    old_keys = os.environ["INBOX_KEK"]
    new = keyring.new_key()
    monkeypatch.setenv("INBOX_KEK", f"{new},{old_keys}")
    with engine.connect() as conn:  # both keys listed: the old values still decrypt
        assert sreads.get_source(conn, src.tenant, src.name).secrets == (CLEAR,)
    result = CliRunner().invoke(main, ["secrets", "reencrypt"])
    assert result.exit_code == 0, result.output
    assert "source_secrets: 1 of 1 re-encrypted" in result.output
    assert "endpoint_secrets: 1 of 1 re-encrypted" in result.output
    monkeypatch.setenv("INBOX_KEK", new)  # the old key dropped
    with engine.connect() as conn:
        assert sreads.get_source(conn, src.tenant, src.name).secrets == (CLEAR,)
        assert ereads.get_endpoint(conn, ep.id).secrets == (ENDPOINT_CLEAR,)
    for stored in raw_secrets(engine):
        with pytest.raises(keyring.KeyInvalid):
            old.decrypt(stored)
    again = CliRunner().invoke(main, ["secrets", "reencrypt"])
    assert "source_secrets: 0 of 1 re-encrypted" in again.output


def test_without_the_key_the_receiver_answers_503_and_stores_nothing(
    client, make_source, engine, monkeypatch
):
    src = make_source()
    monkeypatch.setenv("INBOX_KEK", keyring.new_key())  # not the key the secret was stored with
    body = body_of({"a": 1})
    resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k"))
    assert resp.status_code == 503 and resp.headers["Retry-After"]
    assert "INBOX_KEK" not in resp.get_data(as_text=True)  # the reason is for the log only
    monkeypatch.delenv("INBOX_KEK")
    resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k"))
    assert resp.status_code == 503
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events")).scalar_one() == 0


def test_the_route_cache_decrypts_once_not_per_request(
    settings, engine, bell, make_source, monkeypatch
):
    from web import create_app

    src = make_source()  # (stores and reads the source once: not counted)
    calls = []
    real = keyring.Keyring.decrypt

    def spy(self, stored):
        calls.append(stored)
        return real(self, stored)

    monkeypatch.setattr(keyring.Keyring, "decrypt", spy)
    app = create_app(settings, engine=engine, doorbell=bell, route_cache_seconds=60)
    client = app.test_client()
    for i in range(20):
        body = body_of({"i": i})
        resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, f"k{i}"))
        assert resp.status_code == 202
    assert len(calls) == 1  # one source, one secret, one load of the route cache


def test_the_migration_encrypts_secrets_stored_in_clear(empty_db, monkeypatch):
    migrate.upgrade(empty_db, "0009_event_attempts")
    engine = create_engine(sqlalchemy_url(empty_db))
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO tenants (name) VALUES ('t')"))
            conn.execute(
                text(
                    "INSERT INTO sources (tenant_id, name, scheme)"
                    " SELECT id, 's', 'hmac' FROM tenants"
                )
            )
            conn.execute(
                text("INSERT INTO source_secrets (source_id, secret) SELECT id, :c FROM sources"),
                {"c": CLEAR},
            )
        monkeypatch.delenv("INBOX_KEK")
        with pytest.raises(RuntimeError, match="INBOX_KEK is not set"):
            migrate.upgrade(empty_db)
        with engine.connect() as conn:  # nothing half-done: still in clear, still at 0008
            assert conn.execute(text("SELECT secret FROM source_secrets")).scalar_one() == CLEAR
        monkeypatch.setenv("INBOX_KEK", keyring.new_key())
        migrate.upgrade(empty_db)
        with engine.connect() as conn:
            [stored] = conn.execute(text("SELECT secret FROM source_secrets")).scalars()
            assert stored.startswith("fernet:") and CLEAR not in stored
            assert sreads.get_source(conn, "t", "s").secrets == (CLEAR,)
        migrate.downgrade(empty_db, "0009_event_attempts")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT secret FROM source_secrets")).scalar_one() == CLEAR
    finally:
        engine.dispose()
