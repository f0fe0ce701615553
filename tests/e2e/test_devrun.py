"""``make run`` (python -m dev.devrun) as a new user runs it: no DATABASE_URL or REDIS_URL,
a .data directory of its own. It says Ready once, restarts a child that dies, and on
SIGTERM stops every process it started, the embedded PostgreSQL and Redis included."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dev.devrun import redis_port
from dev.embedded import free_port
from tests.helpers import eventually
from tests.procs import ROOT

pytestmark = pytest.mark.e2e


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def pids_matching(text: str) -> set[int]:
    return {
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and text in cmdline(int(p.name))
    }


class DevRun:
    def __init__(self, data: Path, port: int, shell: dict[str, str] | None = None) -> None:
        data.mkdir(parents=True, exist_ok=True)
        self.log_path = data / "make-run.log"
        self.log = open(self.log_path, "wb")
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "INBOX_KEYSTORE_URL", "REDIS_URL", "BROKER_URL")
        }
        env.update({"INBOX_DEV_DATA": str(data), "PORT": str(port), **(shell or {})})
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "dev.devrun"],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float, count: int = 1) -> str:
        def seen() -> bool:
            return len(re.findall(pattern, self.output())) >= count

        eventually(lambda: seen() or self.popen.poll() is not None, timeout, interval=0.2)
        out = self.output()
        if len(re.findall(pattern, out)) >= count:
            return out
        raise AssertionError(f"no {pattern!r} in make run's output:\n{out[-4000:]}")


@pytest.fixture
def data_dir():
    # Under the checkout, not /tmp: as root, the embedded PostgreSQL runs as another user,
    # who must be able to reach its data directory.
    path = ROOT / ".data" / f"devrun-test-{os.getpid()}-{time.monotonic_ns()}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_make_run_supervises_says_ready_and_stops_everything(data_dir):
    port = free_port()
    run = DevRun(data_dir, port)
    try:
        out = run.wait_for(r"Ready: web, worker, courier, beat are up", 240)
        # one Ready block, with the console's token (kept) and the second shell's exports
        token = (data_dir / "operator_token").read_text().strip()
        assert token in out
        for name in ("DATABASE_URL", "INBOX_KEYSTORE_URL", "REDIS_URL", "BROKER_URL"):
            assert f"export {name}=" in out
        # The payloads' key store: a database of its own beside the embedded one.
        assert re.search(r"export INBOX_KEYSTORE_URL=\S*/postgres_keys", out), out[-2000:]
        assert "[tasks]" not in out and "-------------- [queues]" not in out  # no banners
        redis_port = re.search(r"export REDIS_URL=redis://127.0.0.1:(\d+)/0", out).group(1)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/")
        resp = conn.getresponse()
        assert resp.status == 302 and resp.getheader("Location").endswith("/ui")
        conn.close()

        # a child that dies comes back
        (worker,) = [p for p in descendants(run.popen.pid) if "-Q inbox" in cmdline(p)
                     and "celery" in cmdline(p) and "bash" not in cmdline(p)
                     and _parent(p) == run.popen.pid]  # fmt: skip
        os.kill(worker, signal.SIGKILL)
        run.wait_for(r"worker exited \(signal SIGKILL\); restart #1 in 1 s", 30)
        run.wait_for(r"worker@\S+ ready\.", 90, count=2)
        assert "Ready:" in run.output() and run.output().count("Ready: web") == 1

        # SIGTERM: every process it started is gone, the embedded servers too
        pg_pid = int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])
        everything = descendants(run.popen.pid) | {pg_pid}
        everything |= pids_matching(f"redis-server 127.0.0.1:{redis_port}")
        assert len(everything) >= 6 and all(running(p) for p in {pg_pid})
        run.popen.send_signal(signal.SIGTERM)
        run.popen.wait(90)
        eventually(lambda: not any(running(p) for p in everything), 30, interval=0.2)
        left = {p: cmdline(p) for p in everything if running(p)}
        assert left == {}, left
        assert "stopped the embedded PostgreSQL" in run.output()
        assert "stopped the embedded Redis" in run.output()

        # Started again: the same exports reach it (the Redis port is kept in .data/).
        exported = (data_dir / "exports").read_text()
        assert f"REDIS_URL=redis://127.0.0.1:{redis_port}/0" in exported
        run.log.close()
        run = DevRun(data_dir, port)
        again = run.wait_for(r"Ready: web, worker, courier, beat are up", 240)
        assert f"export REDIS_URL=redis://127.0.0.1:{redis_port}/0" in again
        assert (data_dir / "exports").read_text() == exported
        run.popen.send_signal(signal.SIGTERM)
        run.popen.wait(90)
    finally:
        if run.popen.poll() is None:
            os.killpg(run.popen.pid, signal.SIGKILL)
        run.log.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_make_run_stops_everything_on_a_signal_to_makes_own_pid(data_dir, sig):
    """A script or supervisor that runs ``make run`` in the background holds make's pid,
    not a process group: a SIGINT or SIGTERM to that pid alone stops make, devrun, the
    four processes and the embedded PostgreSQL and Redis (GNU make passes SIGTERM on to
    its child, not SIGINT; devrun notices make's)."""
    port = free_port()
    data_dir.mkdir(parents=True)
    log_path = data_dir / "make-run.log"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env = {k: v for k, v in env.items() if k not in ("BROKER_URL", "MAKEFLAGS", "MFLAGS")}
    env.update({"INBOX_DEV_DATA": str(data_dir), "PORT": str(port)})
    with open(log_path, "wb") as log:
        make = subprocess.Popen(
            ["make", "-s", "run"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:

            def ready() -> bool:
                return "Ready: web" in log_path.read_text(errors="replace")

            eventually(lambda: ready() or make.poll() is not None, 240, interval=0.2)
            assert ready(), log_path.read_text(errors="replace")[-4000:]
            assert "Warning" not in log_path.read_text(errors="replace")  # platformdirs' was
            pg_pid = int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])
            redis_at = (data_dir / "redis.port").read_text().strip()
            everything = descendants(make.pid) | {pg_pid}
            everything |= pids_matching(f"redis-server 127.0.0.1:{redis_at}")
            assert len(everything) >= 7, everything  # devrun, 4 processes, pg, redis
            os.kill(make.pid, sig)  # its own pid, not its group
            make.wait(90)
            eventually(lambda: not any(running(p) for p in everything), 30, interval=0.2)
            left = {p: cmdline(p) for p in everything if running(p)}
            assert left == {}, left
            out = log_path.read_text(errors="replace")
            assert "stopped the embedded PostgreSQL" in out and "stopped the embedded Redis" in out
        finally:
            if make.poll() is None:
                os.killpg(make.pid, signal.SIGKILL)
                make.wait(30)


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def test_a_busy_port_is_one_line_that_names_port(data_dir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = DevRun(data_dir, port)
        assert run.popen.wait(60) == 1
        run.log.close()
        out = run.output().strip()
    assert out.splitlines() == [out] and f"PORT {port} is in use" in out


def _one_line(run: DevRun) -> str:
    assert run.popen.wait(60) == 1
    run.log.close()
    out = run.output().strip()
    assert out.splitlines() == [out] and "Traceback" not in out, out
    return out


def test_stale_exports_from_an_earlier_make_run_are_one_line(data_dir):
    data_dir.mkdir(parents=True)
    shell = {
        "DATABASE_URL": f"postgresql://postgres:@/postgres?host={data_dir / 'pg'}",
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
    }
    shell["BROKER_URL"] = shell["REDIS_URL"]
    (data_dir / "exports").write_text(
        "".join(f"export {k}='{v}'\n" for k, v in shell.items()) + "export INBOX_KEK='k'\n"
    )
    out = _one_line(DevRun(data_dir, free_port(), shell))
    assert "DATABASE_URL, REDIS_URL, BROKER_URL in this shell are exports from an earlier" in out
    assert "unset DATABASE_URL INBOX_KEYSTORE_URL REDIS_URL BROKER_URL" in out
    assert "eval $(make -s env)" in out
    # make env prints what the last Ready block exported, for eval
    env = subprocess.run(
        [sys.executable, "-m", "dev.devrun", "env"],
        cwd=ROOT,
        env={**os.environ, "INBOX_DEV_DATA": str(data_dir)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert env.returncode == 0 and env.stdout == (data_dir / "exports").read_text()


def test_a_url_that_does_not_answer_is_one_line(data_dir):
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/inbox"
    out = _one_line(DevRun(data_dir, free_port(), {"DATABASE_URL": url}))
    assert out == (
        "DATABASE_URL set in this shell but nothing answers there: start that server, or"
        " unset DATABASE_URL and make run starts an embedded one"
    )


def test_the_embedded_redis_keeps_its_port_across_restarts(tmp_path):
    first = redis_port(tmp_path)
    assert redis_port(tmp_path) == first  # a restart: the same port, the exports still work
    with socket.socket() as taken:  # unless something else took it meanwhile
        taken.bind(("127.0.0.1", first))
        taken.listen()
        other = redis_port(tmp_path)
    assert other != first and redis_port(tmp_path) == other
