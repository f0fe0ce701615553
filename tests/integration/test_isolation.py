"""The suite touches only what it started: a Redis server of its own (never a database
number of someone's 127.0.0.1:6379) and PostgreSQL databases it creates and drops."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis

from dev.embedded import reachable
from tests.conftest import ROOT, SHARED_REDIS_PORT

PROBE = "INBOX_TEST_ISOLATION_PROBE"


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_the_suite_redis_is_a_server_this_run_started(redis_url, redis_server):
    port = urlsplit(redis_url).port
    assert port != SHARED_REDIS_PORT
    info = redis.Redis.from_url(redis_url).info("server")
    assert info["tcp_port"] == port
    if redis_server is None:
        pytest.skip("INBOX_TEST_REDIS_URL names a Redis elsewhere")
    assert info["process_id"] == redis_server.proc.pid
    assert _parent(info["process_id"]) == os.getpid()


def test_the_suite_database_is_one_it_made(database_url, pg_server_url):
    name = urlsplit(database_url).path.lstrip("/")
    assert name.startswith("inbox_test_") and name != urlsplit(pg_server_url).path.lstrip("/")


@pytest.mark.skipif(
    not os.environ.get(PROBE), reason="run by the test below, in a pytest of its own"
)
def test_probe(redis_url, database_url):  # Redis first: a refused one stops the run at once
    Path(os.environ[PROBE]).write_text(f"{database_url}\n{redis_url}\n")


def _own_run_env() -> dict[str, str]:
    """This environment less what ties a process to this run (its id, its xdist worker,
    its database and Redis): the child is a run of its own, and drops only its own."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYTEST_")
        and k not in ("INBOX_TEST_RUN", "INBOX_TEST_REDIS_URL")
        and k not in ("DATABASE_URL", "REDIS_URL", "BROKER_URL")
    }


def _pytest(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "probe.txt"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"{Path(__file__).relative_to(ROOT)}::test_probe"],
        cwd=ROOT,
        env={**_own_run_env(), PROBE: str(out), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    return proc, out


def test_a_run_leaves_no_database_and_no_redis_behind(tmp_path, pg_server_url):
    proc, out = _pytest(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    database_url, redis_url = out.read_text().split()
    name = urlsplit(database_url).path.lstrip("/")
    run = name.split("_")[2]  # inbox_test_<run>_<worker>, cloned from inbox_tpl_<run>
    with psycopg.connect(pg_server_url) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"inbox_%{run}%",)
        )
        assert left.fetchall() == []
    port = urlsplit(redis_url).port
    assert port not in (SHARED_REDIS_PORT, None)
    assert not reachable("127.0.0.1", port)


def test_a_redis_on_port_6379_is_refused(tmp_path):
    proc, out = _pytest(tmp_path, INBOX_TEST_REDIS_URL="redis://127.0.0.1:6379/3")
    assert proc.returncode != 0 and not out.exists()
    assert "never port 6379" in proc.stdout, proc.stdout
