"""What the benchmarks share: databases, processes, the load generator, CPU accounting.

**Load: wrk** (``apt-get install wrk``), an epoll loop in C with a little Lua per request,
so most of the two cores are left to what is measured: a closed loop over keep-alive
connections, one per sender; 1 KiB JSON bodies signed with the ``hmac`` scheme, which takes
the event id from the Idempotency-Key header, so one body and one signature serve a whole
level. wrk stops at its deadline with up to one request per connection in flight: those
may be stored without their answer being counted.

**CPU accounting** from /proc (Linux), one way for every benchmark: ``Sampler`` counts each
process tree (its children that ended and were reaped included), PostgreSQL, and the
machine's busy time; ``window`` subtracts two samples; everything unaccounted is ``other``.

**The speed probe** (``probe_cpus``) tells a slow run from a slow machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

BENCH = Path(__file__).resolve().parent.parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
BIN = Path(sys.executable).parent
LOGS = ROOT / ".data"

# -- databases and processes -------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def create_database(pg_url: str, prefix: str = "inbox_bench") -> tuple[str, str]:
    """A fresh database, migrated to head: (name, url)."""
    from inbox.store import migrate

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = pg_url.partition("?")
    url = base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")
    migrate.upgrade(url)
    return name, url


def drop_database(pg_url: str, name: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def web_args(app: str, port: int, workers: int, threads: int) -> list[str]:
    """The project's web server (``python -m web``, as the Procfile runs it) on 127.0.0.1."""
    return [
        *(str(BIN / "python"), "-m", "web", "--app", app, "--host", "127.0.0.1"),
        *("--port", str(port), "--workers", str(workers), "--threads", str(threads)),
    ]


def use_own_kek() -> None:
    """Signing secrets are encrypted at rest (INBOX_KEK): the run's own key, for all."""
    from cryptography.fernet import Fernet

    os.environ.setdefault("INBOX_KEK", Fernet.generate_key().decode())


class Proc:
    """A process we started, in its own session (``stop`` signals that process group and
    nothing else), its output in ``.data/bench-<tag>-<pid>.log``."""

    def __init__(self, args: list[str], env: Mapping[str, str | None], tag: str) -> None:
        """``env`` adds to this process's environment; a None value removes the variable."""
        LOGS.mkdir(exist_ok=True)
        self.tag = tag
        self.node = ""  # a celery worker's node name
        self.log_path = LOGS / f"bench-{tag}-{os.getpid()}.log"
        self._log = open(self.log_path, "wb")
        self.popen = subprocess.Popen(
            args,
            env={k: v for k, v in {**os.environ, **env}.items() if v is not None},
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(5)
        self._log.close()

    def tail(self, n: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


def celery_worker(
    app: str, queue: str, concurrency: int, env: dict[str, str], tag: str, *extra: str
) -> Proc:
    """``extra``: more of the worker's options (``--pool threads``, ``--loglevel INFO``)."""
    node = f"{tag}-{time.monotonic_ns()}@%h"
    level = os.environ.get("BENCH_CELERY_LOGLEVEL", "WARNING")
    args = [
        *(str(BIN / "celery"), "-A", app, "worker", "-Q", queue, "--concurrency", str(concurrency)),
        *("-n", node, "--loglevel", level, "--without-gossip", "--without-mingle", *extra),
    ]
    proc = Proc(args, env, tag)
    proc.node = node.replace("%h", socket.gethostname())
    return proc


def celery_beat(app: str, env: dict[str, str], tag: str) -> Proc:
    schedule = LOGS / f"bench-{tag}-{os.getpid()}.schedule"
    args = [str(BIN / "celery"), "-A", app, "beat", "--loglevel", "WARNING"]
    return Proc([*args, "--schedule", str(schedule)], env, tag)


def web(
    app: str, env: Mapping[str, str | None], workers: int, threads: int, tag: str = "web"
) -> tuple[Proc, int]:
    port = free_port()
    env = {"WEB_GRACEFUL_TIMEOUT": "5", **env}
    return Proc(web_args(app, port, workers, threads), env, tag), port


def _wait_ready(proc: Proc, what: str, timeout: float, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{what} exited:\n{proc.tail()}")
        if ready():
            return
    raise RuntimeError(f"{what} not ready:\n{proc.tail()}")


def wait_http(proc: Proc, port: int, timeout: float = 30, any_answer: bool = False) -> None:
    """Until ``GET /healthz`` answers 200 (``any_answer``: answers at all)."""

    def ready() -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200 or any_answer
        except OSError:
            time.sleep(0.1)
            return False
        finally:
            conn.close()

    _wait_ready(proc, "web server", timeout, ready)


def wait_celery(control_app: Any, proc: Proc, timeout: float = 60) -> None:
    """Until the worker answers a broadcast ping (its consumer and pool are up)."""

    def ready() -> bool:
        replies = control_app.control.ping(destination=[proc.node], timeout=0.5)
        return any(proc.node in r for r in replies)

    _wait_ready(proc, "celery worker", timeout, ready)


def signed(secret: str, body: bytes, key: str) -> dict[str, str]:
    """Headers of a request signed with the ``hmac`` scheme."""
    ts = str(int(time.time()))
    sig = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    headers = {"Content-Type": "application/json", "X-Timestamp": ts, "X-Signature": sig}
    return {**headers, "Idempotency-Key": key}


# -- wrk ---------------------------------------------------------------------------------

_RESULT = "WRK-RESULT "

# %(...)s are filled in by Python; everything else is Lua. With ``repeat`` every second
# request carries the previous request's key: wrk calls request() for whichever of the
# thread's connections is free next, so the copy goes out on another connection (and,
# as the kernel spreads connections over the server's processes, often another process),
# usually while the first is still in flight.
_SCRIPT = """
local counter, prefix, last = 0, "k-", "k-0"
local copies = %(repeat)s
local threads = {}
statuses, replayed = {}, 0
local body = %(body)s
local headers = {
  ["Content-Type"] = "application/json", ["X-Timestamp"] = "%(ts)s", ["X-Signature"] = "%(sig)s",
}

function setup(thread)
  threads[#threads + 1] = thread
  thread:set("tid", #threads)
end

function init(args) prefix = args[1] .. "-" .. tid .. "-" end

function request()
  counter = counter + 1
  if not (copies and counter %% 2 == 0) then last = prefix .. counter end
  headers["Idempotency-Key"] = last
  return wrk.format("POST", "%(path)s", headers, body)
end

function response(status, hdrs, resp_body)
  statuses[status] = (statuses[status] or 0) + 1
  if hdrs["idempotent-replayed"] or hdrs["Idempotent-Replayed"] then replayed = replayed + 1 end
end

function done(summary, latency, requests)
  local counts, copies_seen, st, e = {}, 0, {}, summary.errors
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses")) do counts[status] = (counts[status] or 0) + n end
    copies_seen = copies_seen + thread:get("replayed")
  end
  for status, n in pairs(counts) do st[#st + 1] = string.format('"%%d":%%d', status, n) end
  io.write(string.format('%(marker)s{"requests":%%d,"duration_us":%%d,"p50_ms":%%.3f,'
    .. '"p90_ms":%%.3f,"p99_ms":%%.3f,"max_ms":%%.3f,"transport_errors":%%d,"replayed":%%d,'
    .. '"statuses":{%%s}}\\n', summary.requests, summary.duration, latency:percentile(50) / 1000,
    latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    e.connect + e.read + e.write + e.timeout, copies_seen, table.concat(st, ",")))
end
"""


def make_body(key: str, size: int = 1024) -> bytes:
    """A JSON object of exactly ``size`` bytes whose ``id`` is ``key``."""
    head = '{"id":"' + key + '","type":"bench.event","data":{"pad":"'
    tail = '"}}'
    return (head + "x" * (size - len(head) - len(tail)) + tail).encode()


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def wrk_script(path: str, secret: bytes, repeat: bool) -> str:
    body = make_body("wrk-body")
    ts = str(int(time.time()))
    sig = hmac.new(secret, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    lua = json.dumps(body.decode())  # a JSON string is a valid Lua string here
    fill = {"body": lua, "ts": ts, "sig": sig, "path": path, "marker": _RESULT}
    return _SCRIPT % {**fill, "repeat": "true" if repeat else "false"}


def run_wrk(url: str, script: Path, senders: int, seconds: float, tag: str) -> dict[str, Any]:
    """One wrk run: requests, latency percentiles (ms), statuses ("0": transport errors)."""
    cmd = [
        *("wrk", f"-t{min(2, senders)}", f"-c{senders}", f"-d{max(1, round(seconds))}s"),
        *("--timeout", "30s", "-s", str(script), url, "--", tag),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"wrk exited with {done.returncode}: {done.stderr}")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(_RESULT)), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result:\n{done.stdout}")
    result: dict[str, Any] = json.loads(line[len(_RESULT) :])
    statuses = {str(k): int(v) for k, v in result["statuses"].items()}
    if result["transport_errors"]:
        statuses["0"] = statuses.get("0", 0) + int(result["transport_errors"])
    result["statuses"] = dict(sorted(statuses.items()))
    return result


# -- CPU accounting ----------------------------------------------------------------------

PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK")


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
