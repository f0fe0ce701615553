"""Migrations: an empty database upgrades to exactly the table definitions, and back."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from inbox.domain import ledger
from inbox.store.db.engine import sqlalchemy_url
from inbox.store.schema import migrate
from inbox.store.schema.tables import PARTITIONED, metadata


def _not_a_partition(name: str | None, type_: str, parent_names: object) -> bool:
    """A day's partition (or the DEFAULT one) is made by inbox.store.schema.partitions, not in
    tables.py: the comparison covers the partitioned parents."""
    if type_ != "table" or name is None:
        return True
    return not any(
        name == f"{t}_default" or ledger.day_of_partition(t, name) is not None for t in PARTITIONED
    )


def test_upgrade_matches_tables_then_downgrade_empties(empty_db: str) -> None:
    migrate.upgrade(empty_db)
    engine = create_engine(sqlalchemy_url(empty_db))
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={"include_name": _not_a_partition},
        )
        diff = compare_metadata(context, metadata)
        assert diff == [], f"migrations and inbox/store/schema/tables.py disagree: {diff}"
    migrate.downgrade(empty_db, "base")
    with engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) == {"alembic_version"}
        fn = conn.execute(text("SELECT count(*) FROM pg_proc WHERE proname LIKE 'inbox_%'"))
        assert fn.scalar_one() == 0
    engine.dispose()


def test_0030_moves_the_wrapped_keys_to_the_key_store(
    empty_db: str, database_url: str, monkeypatch
) -> None:
    """Keys an older release kept in the inbox's database move to the key store under their
    ids, and the column goes; with keys there and no key store, the upgrade stops and says
    so (nothing dropped); the downgrade brings them back."""
    from inbox.store.db import keystore

    # database_url: its fixture sets INBOX_KEYSTORE_URL, the worker's key store.
    migrate.upgrade(empty_db, "0026_payload_keys")
    engine = create_engine(sqlalchemy_url(empty_db))
    with engine.begin() as conn:
        tenant = conn.execute(
            text("INSERT INTO tenants (name) VALUES ('acme') RETURNING id")
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO data_keys (id, tenant_id, subject_digest, wrapped, destroyed_at)"
                " OVERRIDING SYSTEM VALUE VALUES (900001, :t, 'x', 'fernet:live', NULL),"
                " (900002, :t, 'y', NULL, now())"
            ),
            {"t": tenant},
        )
    store_url = keystore.current().engine.url.render_as_string(hide_password=False)
    monkeypatch.delenv("INBOX_KEYSTORE_URL")
    try:
        migrate.upgrade(empty_db)
    except RuntimeError as err:
        assert "INBOX_KEYSTORE_URL is not set" in str(err)
    else:
        raise AssertionError("upgraded with keys and no key store")
    monkeypatch.setenv("INBOX_KEYSTORE_URL", store_url)
    migrate.upgrade(empty_db)
    assert keystore.current().get(900001) == "fernet:live"
    assert keystore.current().get(900002) is None  # a destroyed key has nothing to move
    with engine.connect() as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("data_keys")}
    assert "wrapped" not in columns
    migrate.downgrade(empty_db, "0026_payload_keys")
    with engine.connect() as conn:
        back = dict(conn.execute(text("SELECT id, wrapped FROM data_keys")).all())
    assert back == {900001: "fernet:live", 900002: None}
    keystore.current().destroy([900001])
    engine.dispose()
