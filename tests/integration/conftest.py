from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Engine

from inbox.infra.config import Settings
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
