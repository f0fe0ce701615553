"""Processes for the drain benchmark (celery workers, beat, the web server) and their CPU time.

Each process runs in its own session with its output in ``.data/bench-drain-*.log``;
``stop`` signals the whole process group it started, and nothing else.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LOGS = ROOT / ".data"
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    def __init__(self, args: list[str], env: dict[str, str], tag: str) -> None:
        LOGS.mkdir(exist_ok=True)
        self.tag = tag
        self.log_path = LOGS / f"bench-drain-{tag}-{os.getpid()}.log"
        self._log = open(self.log_path, "wb")
        self.popen = subprocess.Popen(
            args,
            env={**os.environ, **env},
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

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
        self._log.close()

    def tail(self, n: int = 40) -> str:
        self._log.flush()
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])


def celery_worker(app: str, queue: str, concurrency: int, env: dict[str, str], tag: str) -> Proc:
    node = f"{tag}-{time.monotonic_ns()}@%h"
    args = [
        str(BIN / "celery"),
        "-A",
        app,
        "worker",
        "-Q",
        queue,
        "--concurrency",
        str(concurrency),
        "-n",
        node,
        "--loglevel",
        os.environ.get("BENCH_CELERY_LOGLEVEL", "WARNING"),
        "--without-gossip",
        "--without-mingle",
    ]
    proc = Proc(args, env, tag)
    proc.node = node.replace("%h", socket.gethostname())  # type: ignore[attr-defined]
    return proc


def celery_beat(app: str, env: dict[str, str], tag: str) -> Proc:
    schedule = LOGS / f"bench-drain-{tag}-{os.getpid()}.schedule"
    args = [
        str(BIN / "celery"),
        "-A",
        app,
        "beat",
        "--loglevel",
        "WARNING",
        "--schedule",
        str(schedule),
    ]
    return Proc(args, env, tag)


def web_args(app: str, port: int, workers: int, threads: int) -> list[str]:
    """The project's web server (``python -m web``, as the Procfile runs it) on 127.0.0.1."""
    return [
        *(str(BIN / "python"), "-m", "web", "--app", app, "--host", "127.0.0.1"),
        *("--port", str(port), "--workers", str(workers), "--threads", str(threads)),
    ]


def web(app: str, env: dict[str, str], workers: int, threads: int) -> tuple[Proc, int]:
    port = free_port()
    args = web_args(app, port, workers, threads)
    return Proc(args, {"WEB_GRACEFUL_TIMEOUT": "5", **env}, f"web-{port}"), port


def wait_http(proc: Proc, port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"web server exited:\n{proc.tail()}")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        try:
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
        finally:
            conn.close()
    raise RuntimeError(f"web server not ready:\n{proc.tail()}")


def wait_celery(control_app, proc: Proc, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    """Until the worker answers a broadcast ping (its consumer and pool are up)."""
    deadline = time.monotonic() + timeout
    node = proc.node  # type: ignore[attr-defined]
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"celery worker exited:\n{proc.tail()}")
        replies = control_app.control.ping(destination=[node], timeout=0.5)
        if any(node in r for r in replies):
            return
    raise RuntimeError(f"celery worker not ready:\n{proc.tail()}")


# CPU accounting ------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    try:
        raw = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()


def _cpu_of(fields: list[str]) -> float:
    # utime, stime (fields 14 and 15 of stat; 0-based 11, 12 after the command name)
    return (int(fields[11]) + int(fields[12])) / TICK


def tree_cpu(root: int) -> dict[int, float]:
    """pid -> cpu seconds for ``root`` and every live descendant."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                parents[int(entry.name)] = int(fields[1])
                cpu[int(entry.name)] = _cpu_of(fields)
    members = {root}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in members and pid not in members:
                members.add(pid)
                grew = True
    return {pid: cpu[pid] for pid in members if pid in cpu}


def pids_cpu(pids: list[int]) -> dict[int, float]:
    out: dict[int, float] = {}
    for pid in pids:
        fields = _stat(pid)
        if fields is not None:
            out[pid] = _cpu_of(fields)
    return out


def machine_busy() -> tuple[float, float]:
    """(busy cpu seconds of all cores, total cpu seconds of all cores) since boot."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in first]
    idle = values[3] + values[4]
    total = sum(values[:8])
    return (total - idle) / TICK, total / TICK


def delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU spent between two samples; a pid first seen in ``after`` counts from zero."""
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


def wait_quiet(max_wait: float, threshold: float = 0.25, sample: float = 2.0) -> dict[str, float]:
    """Wait (up to ``max_wait`` s) until the machine's busy share over ``sample`` seconds
    drops below ``threshold``; returns how long it waited and the last busy share."""
    started = time.monotonic()
    while True:
        busy0, total0 = machine_busy()
        time.sleep(sample)
        busy1, total1 = machine_busy()
        share = (busy1 - busy0) / max(total1 - total0, 1e-9)
        waited = time.monotonic() - started
        if share < threshold or waited >= max_wait:
            return {"quiet_wait_s": round(waited, 1), "busy_before": round(share, 2)}


def harness_pids() -> list[int]:
    """This process (the benchmark itself, with its sender threads) and redis-server."""
    pids = [os.getpid()]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "redis-server":
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids
