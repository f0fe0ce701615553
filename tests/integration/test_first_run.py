"""What a new user meets first: ``/`` leads to the console; a busy port is one line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.procs import ROOT
from web import create_app


def test_the_root_redirects_to_the_console(settings, engine):
    client = create_app(settings, engine=engine, doorbell=lambda: None).test_client()
    resp = client.get("/")
    assert resp.status_code == 302 and resp.headers["Location"].endswith("/ui")


def test_the_web_server_on_a_busy_port_says_so_in_one_line_naming_port(database_url):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "web", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": database_url},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 1
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert lines == [f"PORT {port} is in use on 127.0.0.1: set PORT (or --port) to a free port"]
