"""Starting real processes (the web server, celery) for end-to-end tests."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dev.embedded import free_port

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


class Proc:
    def __init__(self, args: list[str], env: dict[str, str | None], name: str) -> None:
        """``env`` adds to this process's environment; a None value removes the variable."""
        self.name = name
        (ROOT / ".data").mkdir(exist_ok=True)  # a fresh clone has none yet
        self.log = open(ROOT / ".data" / f"{name}-{os.getpid()}.log", "wb")
        self.popen = subprocess.Popen(
            args,
            env={k: v for k, v in {**os.environ, **env}.items() if v is not None},
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        self.log.close()

    def freeze(self, timeout: float = 10) -> None:
        """SIGSTOP its process group, and return once every thread of it has stopped.

        A stop signal wakes one thread of a process, and that thread stops the others when
        it runs: until then another thread (one woken by an answer on its socket) runs on.
        On a loaded machine that took long enough for a courier to read an answer sent
        after ``killpg`` returned, and commit it. Hence the wait on ``/proc``."""
        os.killpg(self.popen.pid, signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while not all(state in "TtZX" for state in _thread_states(self.popen.pid)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} did not stop in {timeout} s")
            time.sleep(0.001)

    def output(self) -> str:
        self.log.flush()
        return (ROOT / ".data" / f"{self.name}-{os.getpid()}.log").read_text(errors="replace")


class Web(Proc):
    """``python -m web`` (the Procfile's web process) on a free port.

    One worker process unless a test asks for more: each granian worker imports the app
    (about a second of CPU), and only the tests of two processes racing need two."""

    def __init__(
        self,
        env: dict[str, str | None],
        app: str = "web.wsgi:app",
        workers: int = 1,
        extra: tuple[str, ...] = (),
    ) -> None:
        (ROOT / ".data").mkdir(exist_ok=True)
        self.port = free_port()
        super().__init__(
            [
                sys.executable,
                "-m",
                "web",
                "--app",
                app,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                str(workers),
                *extra,
            ],
            {"WEB_GRACEFUL_TIMEOUT": "5", **env},
            f"web-{self.port}",
        )
        self.wait_ready()

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"web server exited:\n{self.output()}")
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
            try:
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                time.sleep(0.1)
            finally:
                conn.close()
        raise RuntimeError(f"web server not ready:\n{self.output()}")

    def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()


class CeleryProc(Proc):
    """``celery -A workers.app worker`` or ``beat`` as a real process."""

    def __init__(self, env: dict[str, str], kind: str = "worker", concurrency: int = 1) -> None:
        (ROOT / ".data").mkdir(exist_ok=True)
        tag = f"celery-{kind}-{time.monotonic_ns()}"
        args = [str(BIN / "celery"), "-A", "workers.app", "worker", "--loglevel", "INFO"]
        if kind != "beat":  # as the Procfile's worker and courier lines
            args += ["--without-mingle", "--without-gossip"]
        if kind == "worker":
            args += ["-Q", "inbox", "--concurrency", str(concurrency), "-n", f"{tag}@%h"]
        elif kind == "courier":
            args += [
                "-Q",
                "deliveries",
                "--pool",
                "threads",
                "--concurrency",
                str(concurrency),
                "-n",
                f"{tag}@%h",
            ]
        else:
            args[3] = "beat"
            args += ["--schedule", str(ROOT / ".data" / f"{tag}.schedule")]
        super().__init__(args, env, tag)


def in_group(pgid: int) -> dict[int, str]:
    """The processes of a process group: pid -> scheduler state (``R``, ``S``, ``T``, ``Z``...)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile
        if int(fields[2]) == pgid:
            found[int(entry.name)] = fields[0]
    return found


def _thread_states(pgid: int) -> list[str]:
    """The scheduler state of every thread of every process in a process group."""
    states = []
    for pid in in_group(pgid):
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except OSError:
            continue  # it ended meanwhile
    return states
