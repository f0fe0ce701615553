"""Every command block of docs/tutorial.md, run as written against a real pipeline.

Each fenced ``sh`` block of the tutorial is preceded by a marker:

- ``<!-- test: run -->``: run once, in a fresh ``bash -eu`` in the test's checkout;
- ``<!-- test: until -->``: run again until its output matches (the workers are
  asynchronous: a reader looks a moment later);
- ``<!-- test: pipeline -->``: ``[VAR=value ...] make run``; the test (re)starts what
  ``make run`` starts (migrate, then the Procfile's web, worker, courier and beat) with
  those variables, on a free port and a Redis of its own.

A ``<!-- test: expect -->`` ``text`` block after a command block is its expected output:
each non-blank line must match a line of the output, in order, with ``…`` matching
anything and runs of spaces matching any run of spaces. The tutorial's
``http://127.0.0.1:8000`` becomes the test's own address; the test's checkout is a
temporary directory whose ``.venv`` is this interpreter's virtualenv.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dev.embedded import free_port
from tests.brokers import PrivateRedis
from tests.helpers import eventually

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
VENV = Path(sys.prefix)
DOC_URL = "http://127.0.0.1:8000"

MARKER = re.compile(r"^<!-- test: (run|until|pipeline|expect) -->$")
FENCE = re.compile(r"^```(\w*)\s*$")
PIPELINE = re.compile(r"^((?:[A-Z_]+=\S+ )*)make run$")


@dataclass
class Block:
    kind: str  # run | until | pipeline
    code: str
    line: int
    expect: str | None = None


def _fenced(lines: list[str], i: int) -> tuple[str, str, int]:
    """The language and body of the fenced block opening at line i, and the line after it."""
    m = FENCE.match(lines[i])
    assert m, f"tutorial.md:{i + 1}: a marker must be followed by a fenced block"
    end = lines.index("```", i + 1)
    return m.group(1), "\n".join(lines[i + 1 : end]), end + 1


def parse(text: str) -> list[Block]:
    lines = text.split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if not m:
            i += 1
            continue
        lang, body, after = _fenced(lines, i + 1)
        if m.group(1) == "expect":
            assert lang == "text" and blocks, f"tutorial.md:{i + 1}: expect follows a command"
            blocks[-1].expect = body
        else:
            assert lang == "sh", f"tutorial.md:{i + 1}: commands are fenced as sh"
            blocks.append(Block(m.group(1), body, i + 2))
        i = after
    return blocks


def _line(want: str) -> re.Pattern[str]:
    parts = []
    for token in re.split(r"(…|\s+)", want.strip()):
        if token == "…":
            parts.append(".*?")
        elif token.isspace():
            parts.append(r"\s+")
        elif token:
            parts.append(re.escape(token))
    return re.compile("".join(parts))


def matches(expect: str, output: str) -> str | None:
    """None when every expected line matches an output line, in order; else the first miss."""
    out = output.splitlines()
    at = 0
    for want in (w for w in expect.splitlines() if w.strip()):
        pattern = _line(want)
        while at < len(out) and not pattern.search(out[at]):
            at += 1
        if at == len(out):
            return want
        at += 1
    return None


class Pipeline:
    """What ``make run`` starts, in the test's checkout, against its own stores."""

    def __init__(self, checkout: Path, env: dict[str, str]) -> None:
        self.dir, self.env = checkout, env
        self.port = int(env["PORT"])
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, extra: dict[str, str]) -> None:
        env = {**self.env, **extra, "PYTHONPATH": str(self.dir)}
        bin_ = VENV / "bin"
        subprocess.run([str(bin_ / "inbox"), "migrate"], env=env, cwd=self.dir, check=True)
        celery = [str(bin_ / "celery"), "-A", "workers.app"]
        commands = {
            "web": [str(bin_ / "python"), "-m", "web", "--workers", "1", "--threads", "8"],
            "worker": [*celery, "worker", "-Q", "inbox", "--concurrency", "1", "-n", "w@%h"],
            "courier": [*celery, "worker", "-Q", "deliveries", "--pool", "threads", "-n", "c@%h"],
            "beat": [*celery, "beat", "--schedule", str(self.dir / ".data" / "beat")],
        }
        (self.dir / ".data").mkdir(exist_ok=True)
        for name, args in commands.items():
            with open(self.dir / ".data" / f"{name}.log", "ab") as log:  # the child keeps it
                popen = subprocess.Popen(
                    args, env=env, cwd=self.dir, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            self.procs.append((name, popen))
        self._wait_web()

    def _wait_web(self, timeout: float = 60) -> None:
        def up() -> bool:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                conn.request("GET", "/healthz")
                return conn.getresponse().status == 200
            except OSError:
                return False
            finally:
                conn.close()

        if not eventually(up, timeout, interval=0.2):
            raise AssertionError(f"web not up on :{self.port}\n{self.logs()}")

    def stop(self) -> None:
        for _, p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for _, p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        self.procs = []

    def logs(self) -> str:
        out = []
        for name in ("web", "worker", "courier", "beat"):
            path = self.dir / ".data" / f"{name}.log"
            if path.exists():
                out.append(f"--- {name}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(out)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A directory that stands for the checkout: only its .venv (this virtualenv)."""
    (tmp_path / ".venv").symlink_to(VENV)
    return tmp_path


@pytest.fixture
def pipeline(checkout: Path, empty_db: str, private_redis: PrivateRedis) -> Iterator[Pipeline]:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": empty_db,
        "REDIS_URL": private_redis.url,
        "BROKER_URL": private_redis.url,
        "PORT": str(port),
        "INBOX_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "INBOX_ALLOW_PRIVATE_TARGETS": "1",  # as make run: the callback goes to 127.0.0.1
        "WEB_CONCURRENCY": "1",
    }
    env.pop("INBOX_PLAYBOOKS", None)
    p = Pipeline(checkout, env)
    yield p
    p.stop()


def _run(p: Pipeline, code: str) -> tuple[int, str]:
    env = {k: v for k, v in p.env.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        ["bash", "-eu", "-o", "pipefail", "-c", code],
        env=env, cwd=p.dir, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def test_every_command_block_is_marked():
    lines = TUTORIAL.read_text().split("\n")
    for i, line in enumerate(lines):
        if line.startswith("```sh"):
            assert i > 0 and MARKER.match(lines[i - 1]), f"tutorial.md:{i + 1}: unmarked block"
    kinds = [b.kind for b in parse(TUTORIAL.read_text())]
    assert kinds[0] == "pipeline" and kinds.count("until") >= 3


def test_the_matcher():
    assert matches("a  b …\nc", "x\na b zz\ny\nc") is None
    assert matches("c\na b", "a b\nc") == "a b"
    assert matches("evt_… done", "evt_1 running") == "evt_… done"


@pytest.mark.skipif(
    not (shutil.which("curl") and shutil.which("openssl") and shutil.which("redis-server")),
    reason="the tutorial needs curl and openssl, the test a redis-server",
)
@pytest.mark.skipif(
    not (VENV / "bin" / "inbox").exists(), reason="the tests run outside the project's virtualenv"
)
def test_the_tutorial_runs_as_written(pipeline: Pipeline):
    local = f"http://127.0.0.1:{pipeline.port}"
    for block in parse(TUTORIAL.read_text()):
        code = block.code.replace(DOC_URL, local)
        expect = block.expect.replace(DOC_URL, local) if block.expect else None
        if block.kind == "pipeline":
            m = PIPELINE.match(code.strip())
            assert m, f"tutorial.md:{block.line}: a pipeline block is [VAR=value ...] make run"
            extra = dict(kv.split("=", 1) for kv in m.group(1).split())
            pipeline.stop()
            pipeline.start(extra)
            continue
        last: list = []

        def passed(code: str = code, expect: str | None = expect, last: list = last) -> bool:
            status, output = _run(pipeline, code)
            miss = matches(expect, output) if expect else None
            last[:] = [status, output, miss]
            return status == 0 and miss is None

        # An "until" block is tried again for up to 120 s; any other block once.
        eventually(passed, 120 if block.kind == "until" else 0, interval=0.5)
        status, output, miss = last
        where = f"tutorial.md:{block.line}"
        assert status == 0, f"{where} exited {status}:\n{code}\n{output}\n{pipeline.logs()}"
        assert miss is None, f"{where}: no line matches {miss!r} in:\n{output}\n{pipeline.logs()}"
    # What the tutorial wrote into the checkout is ignored by git: a reader who followed it
    # has no untracked files to wonder about (.venv and .data are make run's own, redis/
    # this test's private Redis).
    mine = (".venv", ".data", "redis")
    written = sorted(
        p.name + ("/" if p.is_dir() else "") for p in pipeline.dir.iterdir() if p.name not in mine
    )  # a folder as git sees one: __pycache__/ is the bytecode of the playbook module
    assert written, "the tutorial writes its script and playbook module into the checkout"
    shown = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", *written],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert sorted(shown.stdout.split()) == written, (written, shown.stdout, shown.stderr)
