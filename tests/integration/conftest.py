from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Engine, text

from inbox.domain import ledger
from inbox.infra.config import Settings
from inbox.store.schema.tables import DROP_ORDER
from web import create_app


class Bell:
    """Counts doorbell rings."""

    def __init__(self) -> None:
        self.rings = 0

    def __call__(self) -> None:
        self.rings += 1


@pytest.fixture
def bell() -> Bell:
    return Bell()


@pytest.fixture
def app(settings: Settings, engine: Engine, bell: Bell) -> Iterator[Flask]:
    yield create_app(settings, engine=engine, doorbell=bell, route_cache_seconds=0)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def made_days(engine: Engine) -> Iterator[list[dt.date]]:
    """Days given partitions here; dropped afterwards (children before parents)."""
    made: list[dt.date] = []
    yield made
    with engine.begin() as conn:
        for day in made:
            for t in DROP_ORDER:
                name = ledger.partition_name(t, day)
                if conn.execute(text("SELECT to_regclass(:n)"), {"n": name}).scalar():
                    conn.execute(text(f"ALTER TABLE {t} DETACH PARTITION {name}"))
                    conn.execute(text(f"DROP TABLE {name}"))
