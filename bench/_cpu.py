"""CPU accounting from /proc (Linux): who spent the machine's cores during a window.

Also which worker process holds the receiver's keep-alive connections: a worker owns a
connection from accept to close, so a lopsided split lasts the whole window.

Cumulative counters, sampled at the start and the end of a measured window:

- the machine: busy jiffies of all cores (``/proc/stat``);
- a process tree (the web server and its workers; the load generator): user + system
  time of every live process in the tree;
- PostgreSQL: the postmaster, its auxiliary processes and the backends of the run's
  database, plus the postmaster's ``cutime + cstime`` (the CPU of backends that already
  exited), so connection-per-request backends that come and go between the two samples
  are still counted. Live backends of *other* databases (another user of the same server)
  are not: they land in ``other``.

Everything not attributed (other processes on the machine, the kernel's softirq work) is
reported as ``other``.
"""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


def _stat(pid: int) -> list[str] | None:
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces: split after it.
    return raw[raw.rindex(")") + 2 :].split()


def _table() -> dict[int, tuple[int, float, float]]:
    """pid -> (ppid, own cpu seconds, reaped children's cpu seconds) for every process."""
    out: dict[int, tuple[int, float, float]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is None:
            continue
        # After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
        own = (int(fields[11]) + int(fields[12])) / TICK
        reaped = (int(fields[13]) + int(fields[14])) / TICK
        out[int(entry.name)] = (int(fields[1]), own, reaped)
    return out


def _descendants(table: dict[int, tuple[int, float, float]], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    seen = {root}
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def _title(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, UnicodeDecodeError):
        return ""


def _other_backend(title: str, database: str) -> bool:
    """A backend's title reads ``postgres: [cluster:] user database host(port) state``."""
    words = title.split()
    if f" {database} " in f" {title} " or len(words) < 4:
        return False
    return any((w.endswith(")") and "(" in w) or w == "[local]" for w in words)


def parent_of(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def machine_busy() -> float:
    """Busy CPU seconds of all cores since boot (everything but idle and iowait)."""
    with open(PROC / "stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    return (sum(values) - values[3] - values[4]) / TICK


class Sampler:
    """Cumulative CPU seconds by component; ``sample()`` twice and subtract."""

    def __init__(self, trees: dict[str, int], postmaster: int | None, database: str) -> None:
        self.trees = trees  # name -> root pid of a process tree (root included)
        self.postmaster = postmaster
        self.database = database

    def sample(self) -> dict[str, float]:
        table = _table()
        out = {"machine": machine_busy()}
        claimed: set[int] = set()
        for name, root in self.trees.items():
            pids = _descendants(table, root) - claimed
            claimed |= pids
            # Children that ended and were reaped (a wrk run) count for their parent.
            reaped = table[root][2] if root in table else 0.0
            out[name] = sum(table[p][1] for p in pids if p in table) + reaped
        if self.postmaster is not None and self.postmaster in table:
            pids = {
                p
                for p in _descendants(table, self.postmaster)
                if not _other_backend(_title(p), self.database)
            }
            out["postgres"] = sum(table[p][1] for p in pids) + table[self.postmaster][2]
        return out


def window(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Cores used on average by each component over the window, and ``other``."""
    used = {k: (after[k] - before[k]) / seconds for k in after if k in before}
    attributed = sum(v for k, v in used.items() if k != "machine")
    used["other"] = max(0.0, used["machine"] - attributed)
    return used


def _established_inodes(port: int) -> set[str]:
    """Socket inodes of established IPv4 TCP connections whose local port is ``port``."""
    inodes: set[str] = set()
    try:
        lines = (PROC / "net" / "tcp").read_text().splitlines()[1:]
    except OSError:
        return inodes
    for line in lines:
        fields = line.split()
        # sl local_address rem_address st ... inode(9)
        if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(fields[9])
    return inodes


def connections_by_process(root: int, port: int) -> dict[int, int]:
    """pid -> established connections on ``port`` held by each process of the tree."""
    inodes = _established_inodes(port)
    out: dict[int, int] = {}
    for pid in _descendants(_table(), root):
        try:
            links = [os.readlink(f) for f in (PROC / str(pid) / "fd").iterdir()]
        except OSError:
            continue
        held = sum(1 for link in links if link.startswith("socket:[") and link[8:-1] in inodes)
        if held:
            out[pid] = held
    return out
