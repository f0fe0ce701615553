"""A multi-host DATABASE_URL whose first host is down: every way in reaches the second.

The netloc form (``postgresql://u@h1:p1,h2:p2/db``) goes through the engine, the claims'
own connections, the migrations and the ``inbox`` command as a process of its own; the
query form is covered beside it. The failover itself is tests/e2e/test_failover.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from sqlalchemy import text

from dev.embedded import free_port
from inbox.infra.config import Settings
from inbox.store.db.claim_connections import Connections
from inbox.store.db.claims import row
from inbox.store.db.engine import make_engine
from inbox.store.schema import migrate
from tests.integration.test_claims import _event


def _forms(database_url: str) -> dict[str, str]:
    """The test database behind a dead first host, in both of libpq's forms."""
    parts = urlsplit(database_url)
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there: connection refused
    live = f"{parts.hostname}:{parts.port or 5432}"
    user = parts.netloc.rpartition("@")[0]
    query = "target_session_attrs=read-write" + (f"&{parts.query}" if parts.query else "")
    hosts = ",".join(h.rpartition(":")[0] for h in (dead, live))
    ports = ",".join(h.rpartition(":")[2] for h in (dead, live))
    return {
        "netloc": f"postgresql://{user}@{dead},{live}{parts.path}?{query}",
        "query": f"postgresql://{user}@{parts.path}?host={hosts}&port={ports}&{query}",
    }


@pytest.mark.parametrize("form", ["netloc", "query"])
def test_the_engine_and_the_claim_connections_skip_a_dead_first_host(
    database_url, engine, make_source, form
):
    url = _forms(database_url)[form]
    src = make_source()
    multi = make_engine(Settings(database_url=url))
    try:
        with multi.connect() as conn:
            assert conn.execute(text("SELECT current_database()")).scalar() == urlsplit(
                database_url
            ).path.strip("/")
        got = Connections(multi).insert([row(src, _event(f"multi-{form}"))])
        assert len(got) == 1
    finally:
        multi.dispose()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events")).scalar() == 1


def test_the_migrations_and_the_cli_take_the_netloc_form(database_url, engine):
    url = _forms(database_url)["netloc"]
    migrate.upgrade(url)  # at head already: connects, reads the version, changes nothing
    env = {**os.environ, "DATABASE_URL": url}
    out = subprocess.run(
        [sys.executable, "-m", "inbox.cli", "tenants", "create", "multi-host"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    with engine.connect() as conn:
        names = conn.execute(text("SELECT name FROM tenants")).scalars().all()
    assert names == ["multi-host"]
