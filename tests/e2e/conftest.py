from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.procs import Gunicorn


@pytest.fixture
def web_env(database_url: str) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "INBOX_DB_POOL_SIZE": "10"}


@pytest.fixture
def gunicorn(web_env: dict[str, str]) -> Iterator[Gunicorn]:
    server = Gunicorn(web_env)
    yield server
    server.stop()
