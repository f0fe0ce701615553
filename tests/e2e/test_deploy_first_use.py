"""The deploy guide's first use (docs/how-to/deploy.md), run as written.

The processes are started as a deployment starts them (``inbox migrate``, then web,
worker, courier and beat); then every marked block of the guide runs in order, in a fresh
``bash`` with only the exports the guide names and the virtualenv's ``bin`` on ``PATH``,
its output matched as the tutorial's is (``tests/e2e/test_tutorial.py``). The guide's
``https://inbox.example.com`` is the test's own address. Last, the operator token the guide
makes signs in to the console, as a person pasting it would.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from dev.embedded import free_port
from tests.brokers import PrivateRedis
from tests.e2e.test_tutorial import VENV, Pipeline, matches, parse
from tests.helpers import eventually
from tests.procs import ROOT

pytestmark = pytest.mark.e2e

GUIDE = ROOT / "docs" / "how-to" / "deploy.md"
DOC_URL = "https://inbox.example.com"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def deployed(tmp_path: Path, empty_db: str, private_redis: PrivateRedis) -> Iterator[Pipeline]:
    (tmp_path / ".venv").symlink_to(VENV)
    port = free_port()
    env = {
        "PATH": f"{VENV / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DATABASE_URL": empty_db,
        "REDIS_URL": private_redis.url,
        "INBOX_KEK": os.environ["INBOX_KEK"],
        "INBOX_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "PORT": str(port),
        "WEB_CONCURRENCY": "1",
    }
    p = Pipeline(tmp_path, env)
    p.start({})
    yield p
    p.stop()


def run(p: Pipeline, code: str) -> tuple[int, str]:
    done = subprocess.run(
        ["bash", "-eu", "-o", "pipefail", "-c", code],
        env=p.env, cwd=p.dir, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def sign_in(port: int, token: str) -> tuple[int, str]:
    """The console's sign-in form, as a browser sends it: its CSRF token and cookie."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/ui/login")
        resp = conn.getresponse()
        page = resp.read().decode()
        cookie = (resp.getheader("Set-Cookie") or "").split(";")[0]
        found = CSRF.search(page)
        assert found, page[:2000]
        form = urlencode({"token": token, "csrf": found.group(1)})
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie}
        conn.request("POST", "/ui/login", body=form, headers=headers)
        answer = conn.getresponse()
        answer.read()
        return answer.status, answer.getheader("Location") or ""
    finally:
        conn.close()


@pytest.mark.skipif(
    not (shutil.which("curl") and shutil.which("openssl") and shutil.which("redis-server")),
    reason="the guide needs curl and openssl, the test a redis-server",
)
def test_the_deploy_guides_first_use_runs_as_written(deployed: Pipeline):
    local = f"http://127.0.0.1:{deployed.port}"
    blocks = parse(GUIDE.read_text())
    assert [b.kind for b in blocks] == ["until", "run", "run", "until", "run", "run"]
    outputs: list[str] = []
    for block in blocks:
        code = block.code.replace(DOC_URL, local)
        expect = block.expect.replace(DOC_URL, local) if block.expect else None
        last: list = []

        def passed(code: str = code, expect: str | None = expect, last: list = last) -> bool:
            status, output = run(deployed, code)
            miss = matches(expect, output) if expect else None
            last[:] = [status, output, miss]
            return status == 0 and miss is None

        eventually(passed, 120 if block.kind == "until" else 0, interval=0.5)
        status, output, miss = last
        where = f"deploy.md:{block.line}"
        assert status == 0, f"{where} exited {status}:\n{code}\n{output}\n{deployed.logs()}"
        assert miss is None, f"{where}: no line matches {miss!r} in:\n{output}\n{deployed.logs()}"
        outputs.append(output)
    # The operator token of step 4 signs in to the console.
    token = next(o for o in outputs if "token alice (operator" in o).strip().splitlines()[-1]
    assert token.startswith("inb_")
    status, where = sign_in(deployed.port, token)
    assert status == 302 and where.endswith("/ui/dashboard"), (status, where)
    assert sign_in(deployed.port, token[:-2] + "xx")[0] != 302  # and only that token
