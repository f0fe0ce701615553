"""CPU accounting and the speed probe.

**CPU accounting** from /proc (Linux), one way for every benchmark: ``Sampler`` counts each
process tree (its children that ended and were reaped included), PostgreSQL, and the
machine's busy time; ``window`` subtracts two samples; everything unaccounted is ``other``.

**The speed probe** (``probe_cpus``) tells a slow run from a slow machine.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces: split after it.
    return raw[raw.rindex(")") + 2 :].split()


def process_seconds(pid: int) -> float:
    """One process's own user and system CPU so far, in seconds (0 if it is gone)."""
    fields = _stat(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / TICK


def _table() -> dict[int, tuple[int, float, float]]:
    """pid -> (ppid, own cpu seconds, reaped children's cpu seconds) for every process."""
    out: dict[int, tuple[int, float, float]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or (fields := _stat(int(entry.name))) is None:
            continue
        # After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
        cpu = [int(f) / TICK for f in fields[11:15]]
        out[int(entry.name)] = (int(fields[1]), cpu[0] + cpu[1], cpu[2] + cpu[3])
    return out


def _descendants(table: dict[int, tuple[int, float, float]], root: int) -> set[int]:
    """``root`` and every live descendant."""
    tree, more = {root}, {root}
    while more:
        more = {pid for pid, (ppid, _, _) in table.items() if ppid in more} - tree
        tree |= more
    return tree


def _backend(pid: int, database: str) -> bool | None:
    """Whether a client backend serves ``database``; None if ``pid`` is not a backend. A
    backend's title reads ``postgres: [cluster:] user database host(port) state``."""
    try:
        title = (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, UnicodeDecodeError):
        return None
    words = title.split()
    if len(words) < 4 or not any((w.endswith(")") and "(" in w) or w == "[local]" for w in words):
        return None
    return f" {database} " in f" {title} "


def parent_of(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def postmaster_of(db_url: str) -> int | None:
    """The PostgreSQL server's postmaster, when it runs on this machine."""
    with psycopg.connect(db_url) as conn:  # read while the backend lives: its parent
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return parent_of(int(row[0])) if row else None


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of all cores since boot; busy is all but idle and iowait."""
    with open(PROC / "stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    return (sum(values) - values[3] - values[4]) / TICK, sum(values) / TICK


def wait_quiet(max_wait: float, threshold: float = 0.25, sample: float = 2.0) -> dict[str, float]:
    """Wait (up to ``max_wait`` s) until the machine's busy share over ``sample`` seconds
    drops below ``threshold``; returns how long it waited and the last busy share."""
    started = time.monotonic()
    while True:
        busy0, total0 = machine_cpu()
        time.sleep(sample)
        busy1, total1 = machine_cpu()
        share = (busy1 - busy0) / max(total1 - total0, 1e-9)
        waited = time.monotonic() - started
        if share < threshold or waited >= max_wait:
            return {"quiet_wait_s": round(waited, 1), "busy_before": round(share, 2)}


@dataclass
class Sampler:
    """Cumulative CPU seconds by component; ``sample()`` twice, then ``window``. ``trees``:
    name -> root pid: the root, its live descendants no earlier tree claimed, and the
    children it reaped (a wrk run). PostgreSQL (``postmaster`` None: none): ``private`` (a
    cluster of the run's own), its tree but other databases' backends, and the children
    it reaped; else (a shared server) only the live backends of ``database``."""

    trees: dict[str, int]
    postmaster: int | None
    database: str
    private: bool = True

    def sample(self) -> dict[str, float]:
        table = _table()
        out = {"machine": machine_cpu()[0]}
        claimed: set[int] = set()
        for name, root in self.trees.items():
            pids = _descendants(table, root) - claimed
            claimed |= pids
            reaped = table[root][2] if root in table else 0.0
            out[name] = sum(table[p][1] for p in pids if p in table) + reaped
        pm = self.postmaster
        if pm is not None and pm in table:
            mine = {p: _backend(p, self.database) for p in _descendants(table, pm)}
            if self.private:
                pids = {p for p, m in mine.items() if m is not False}
                out["postgres"] = sum(table[p][1] for p in pids) + table[pm][2]
            else:
                out["postgres"] = sum(table[p][1] for p, m in mine.items() if m)
        return out


def window(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Cores used on average by each component over the window, and ``other``
    (``seconds=1``: CPU seconds instead)."""
    used = {k: (after[k] - before[k]) / seconds for k in after if k in before}
    attributed = sum(v for k, v in used.items() if k != "machine")
    used["other"] = max(0.0, used["machine"] - attributed)
    return used


# -- the speed probe ---------------------------------------------------------------------

ITERATIONS = 2000
ROUNDS = 5

_BODY = json.dumps({"id": "evt_" + "0" * 20, "data": {"note": "x" * 900}}).encode()
_KEY = b"speed-probe-secret"
_PAIRS = [(f"HTTP_X_HEADER_{i}", f"value-{i}") for i in range(16)]


def _once() -> int:
    n = 0
    for _ in range(ITERATIONS):
        sig = hmac.new(_KEY, _BODY, hashlib.sha256).hexdigest()
        digest = hashlib.sha256(_BODY).digest()
        doc = json.loads(_BODY)
        headers = {k[5:].replace("_", "-").lower(): v for k, v in _PAIRS}
        n += len(sig) + len(digest) + len(doc) + len(headers)
    return n


def probe_cpus() -> list[float]:
    """A fixed CPU-bound loop (an HMAC and a SHA-256 of 1 KiB, a json.loads, a small dict)
    on each CPU this process may run on, one after the other: microseconds per iteration
    (lower is faster), the best of ``ROUNDS``."""
    allowed = os.sched_getaffinity(0)
    out = []
    try:
        for cpu in sorted(allowed):
            os.sched_setaffinity(0, {cpu})
            best = float("inf")
            for _ in range(ROUNDS):
                start = time.perf_counter()
                _once()
                best = min(best, time.perf_counter() - start)
            out.append(best * 1e6 / ITERATIONS)
    finally:
        os.sched_setaffinity(0, allowed)
    return out


def shown(values: list[float]) -> str:
    """Per-CPU figures as printed: ``12.22 / 21.06``."""
    return " / ".join(f"{v:.2f}" for v in values)
