from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.procs import CeleryProc, Web


@pytest.fixture
def web_env(database_url: str) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "INBOX_DB_POOL_SIZE": "10"}


@pytest.fixture
def web_server(web_env: dict[str, str]) -> Iterator[Web]:
    server = Web(web_env)
    yield server
    server.stop()


@pytest.fixture
def procs() -> Iterator[list]:
    """Processes a test starts; killed at its end (celery hard, the web server gently)."""
    started: list = []
    yield started
    for p in started:
        p.stop(signal.SIGKILL if isinstance(p, CeleryProc) else signal.SIGTERM)
