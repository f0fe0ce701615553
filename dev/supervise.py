"""A small supervisor for ``make run``: the Procfile's processes, restarted when they die.

Each child runs in a session of its own (so a signal reaches its whole process group) and
gets SIGTERM if this process dies without stopping it (Linux's parent-death signal). A
child that exits is started again after a backoff (1 s, doubling to 30 s; back to 1 s
once it has run a minute), and the restart is logged. ``stop`` sends SIGTERM to every
child's group, waits, then SIGKILLs what is left.

Output is quiet by default: a child's start-up banner is held back until it is ready (and
shown only if it dies first); after that its JSON log lines are shown as one short line
each, without Celery's per-task chatter. ``INBOX_DEV_VERBOSE=1`` shows everything as is.
(Written here rather than taken from honcho, which stops every process when one exits.)
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BACKOFF_START, BACKOFF_MAX, STABLE_SECONDS = 1.0, 30.0, 60.0
STOP_SECONDS = 10.0
_CHATTER = (" received", " succeeded in ", "Scheduler: Sending due task")


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass


@dataclass
class Child:
    name: str
    cmd: str
    ready_text: str | None  # a line that says the child is up; None: `ready` is set by a probe
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    backoff: float = BACKOFF_START
    restart_at: float | None = None
    restarts: int = 0
    ready: threading.Event = field(default_factory=threading.Event)
    held: list[str] = field(default_factory=list)


def ready_text(name: str, cmd: str) -> str | None:
    if "celery" in cmd and " beat" in cmd:
        return "beat: Starting"
    if "celery" in cmd:
        return " ready."
    return None


class Supervisor:
    def __init__(
        self,
        procfile: list[tuple[str, str]],
        env: dict[str, str],
        cwd: Path,
        say: Callable[[str], None] = print,
    ) -> None:
        self.children = [Child(n, c, ready_text(n, c)) for n, c in procfile]
        self.env, self.cwd, self.say = env, cwd, say
        self.verbose = env.get("INBOX_DEV_VERBOSE", "") not in ("", "0")
        self.stopping = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        for child in self.children:
            self._spawn(child)

    def _spawn(self, child: Child) -> None:
        child.ready.clear()
        child.held = []
        child.proc = subprocess.Popen(
            ["bash", "-c", f"exec {child.cmd}"],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        child.started = time.monotonic()
        child.restart_at = None
        threading.Thread(target=self._pump, args=(child, child.proc), daemon=True).start()

    def _pump(self, child: Child, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if child.ready_text and child.ready_text in line:
                child.ready.set()
            self._show(child, line)

    def _show(self, child: Child, line: str) -> None:
        if self.verbose:
            self.say(f"{child.name:>7} | {line}")
            return
        try:
            rec = json.loads(line)
            level, msg = str(rec.get("level", "")), str(rec.get("message", ""))
        except (ValueError, AttributeError):
            rec, level, msg = None, "", line
        if not child.ready.is_set():
            child.held.append(line)  # the banner: shown only if the child dies before ready
            if level in ("WARNING", "ERROR", "CRITICAL"):
                self.say(f"{child.name:>7} | {level} {msg.splitlines()[0] if msg else ''}")
            return
        if rec is None:
            self.say(f"{child.name:>7} | {line}")  # a traceback or a print: show it as is
        elif level != "INFO" or not any(c in msg for c in _CHATTER):
            first = msg.splitlines()[0] if msg else ""
            self.say(f"{child.name:>7} | {level} {first}")

    def wait_ready(self, timeout: float, probe: Callable[[Child], bool]) -> list[str]:
        """Wait until every child is ready; returns the names of those that are not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stopping.is_set():
            for c in self.children:
                if c.ready_text is None and not c.ready.is_set() and probe(c):
                    c.ready.set()
            if all(c.ready.is_set() for c in self.children):
                return []
            self.check()
            time.sleep(0.2)
        return [c.name for c in self.children if not c.ready.is_set()]

    def check(self) -> None:
        """Restart children that exited, each after its backoff."""
        now = time.monotonic()
        for c in self.children:
            if self.stopping.is_set() or c.proc is None:
                return
            code = c.proc.poll()
            if code is None:
                if now - c.started >= STABLE_SECONDS:
                    c.backoff = BACKOFF_START
                continue
            if c.restart_at is None:
                if not c.ready.is_set():
                    for held in c.held[-40:]:
                        self.say(f"{c.name:>7} | {held}")
                c.restart_at = now + c.backoff
                c.restarts += 1
                self.say(
                    f"supervisor | {c.name} exited ({_describe(code)}); restart #{c.restarts}"
                    f" in {c.backoff:.0f} s"
                )
                c.backoff = min(BACKOFF_MAX, c.backoff * 2)
            elif now >= c.restart_at:
                self._spawn(c)
                self.say(f"supervisor | {c.name} restarted (pid {c.proc.pid})")

    def run(self) -> None:
        while not self.stopping.is_set():
            self.check()
            self.stopping.wait(0.5)

    def stop(self) -> None:
        self.stopping.set()
        live = [c for c in self.children if c.proc is not None and c.proc.poll() is None]
        for c in live:
            assert c.proc is not None
            _signal_group(c.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        for c in live:
            assert c.proc is not None
            try:
                c.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"supervisor | {c.name} did not stop in {STOP_SECONDS:.0f} s: killed")
            _signal_group(c.proc.pid, signal.SIGKILL)  # anything left in its group
            c.proc.wait()
            self.say(f"supervisor | stopped {c.name} ({_describe(c.proc.returncode)})")


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _describe(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"
