"""A private etcd and a Patroni-managed pair of PostgreSQL nodes, for failover tests.

Debian's packages (``etcd-server``, ``patroni``, PostgreSQL 15): every listener on
127.0.0.1 and a free port, every file under one temporary folder, every process run as
the ``postgres`` user (PostgreSQL refuses root) and stopped by its pid. ``missing()``
names what a machine lacks, for the test to skip with.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import psycopg

from dev.embedded import free_port
from tests.helpers import eventually, wait_for

SCOPE = "inbox-failover"
RUNNING = ("running", "streaming")  # a member's state: Patroni 3.0 says running
PG_BIN = Path("/usr/lib/postgresql/15/bin")
# Short timings, so a test sees several failovers in a few minutes; Patroni's rule
# loop_wait + 2 * retry_timeout <= ttl holds.
TTL, LOOP_WAIT, RETRY_TIMEOUT = 10, 1, 3


def missing() -> str | None:
    """Why this machine cannot run the pair, or None."""
    need = [c for c in ("etcd", "patroni", "patronictl") if shutil.which(c) is None]
    if need:
        return f"{', '.join(need)} not installed (apt-get install patroni etcd-server)"
    if not (PG_BIN / "postgres").exists():
        return f"PostgreSQL 15 is not installed in {PG_BIN}"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "no postgres user to run PostgreSQL as"
    return None


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _clean_env() -> dict[str, str]:
    """Debian's patroni runs on the system Python: none of this venv's variables."""
    keep = ("PATH", "LANG", "LC_ALL", "TZ")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    return env


class _Daemon:
    def __init__(self, args: list[str], log: Path) -> None:
        self.log_path = log
        self._log = open(log, "ab")
        self.popen = subprocess.Popen(
            _as_postgres(args),
            env=_clean_env(),
            # Its own folder, not the caller's: Patroni starts PostgreSQL through a spawned
            # Python process that changes to the parent's directory first, and a checkout
            # the postgres user may not enter (a clone under a 0700 folder) left the
            # bootstrap waiting forever on "Permission denied".
            cwd=log.parent,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """The whole process group (runuser and the daemon under it), then reap it."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
        self._log.close()


class Node:
    def __init__(self, root: Path, name: str, etcd_port: int) -> None:
        self.name = name
        self.dir = root / name
        self.dir.mkdir()
        self.port = free_port()
        self.rest = free_port()
        self.config = self.dir / "patroni.yml"
        self.config.write_text(json.dumps(_config(self, etcd_port), indent=1))  # YAML ⊃ JSON
        self.patroni: _Daemon | None = None

    @property
    def data(self) -> Path:
        return self.dir / "data"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> _Daemon:
        self.patroni = _Daemon(["patroni", str(self.config)], self.dir / "patroni.log")
        return self.patroni

    def postmaster(self) -> int | None:
        """The pid of this node's running postmaster. A pid file left by a killed one names
        a pid the system may have given to another process since: the pid counts only if
        that process is a postgres started on this node's data directory."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            return None
        ours = any(b"postgres" in arg for arg in cmdline[:1]) and str(self.data).encode() in cmdline
        return pid if ours else None

    def kill_postmaster(self) -> int:
        pid = self.postmaster()
        assert pid is not None, f"{self.name} runs no postmaster"
        os.kill(pid, signal.SIGKILL)
        return pid

    def kill_node(self) -> None:
        """The whole node at once: Patroni, the postmaster and every backend."""
        pid = self.postmaster()
        victims = [pid] if pid else []
        if pid:
            victims += _children(pid)
        if self.patroni is not None:
            os.killpg(self.patroni.popen.pid, signal.SIGKILL)
        for p in victims:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.patroni is not None:
            self.patroni.kill()

    def stop(self) -> None:
        if self.patroni is not None:
            self.patroni.kill(signal.SIGKILL)
        pid = self.postmaster()
        if pid:
            try:
                os.kill(pid, signal.SIGQUIT)  # an orphaned postmaster: immediate shutdown
            except ProcessLookupError:
                pass


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(p) for p in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def _config(node: Node, etcd_port: int) -> dict[str, Any]:
    return {
        "scope": SCOPE,
        "namespace": "/service/",
        "name": node.name,
        "log": {"level": "INFO"},
        "restapi": {
            "listen": f"127.0.0.1:{node.rest}",
            "connect_address": f"127.0.0.1:{node.rest}",
        },
        "etcd3": {"hosts": [f"127.0.0.1:{etcd_port}"]},
        "bootstrap": {
            "dcs": {
                "ttl": TTL,
                "loop_wait": LOOP_WAIT,
                "retry_timeout": RETRY_TIMEOUT,
                "maximum_lag_on_failover": 1048576,
                # Commits wait for the standby: whatever was acknowledged survives.
                "synchronous_mode": True,
                # A crashed primary is not restarted in place: the standby takes over.
                "primary_start_timeout": 0,
                "postgresql": {
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "parameters": {
                        "max_connections": 100,
                        "wal_log_hints": "on",
                        # A killed process, not a crashed machine: the page cache survives.
                        "fsync": "off",
                        "max_wal_senders": 5,
                        "max_replication_slots": 5,
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, "data-checksums", {"auth": "trust"}],
            "pg_hba": [
                "local all all trust",
                "host all all 127.0.0.1/32 trust",
                "host replication all 127.0.0.1/32 trust",
            ],
        },
        "postgresql": {
            "listen": f"127.0.0.1:{node.port}",
            "connect_address": f"127.0.0.1:{node.port}",
            "data_dir": str(node.data),
            "bin_dir": str(PG_BIN),
            "pgpass": str(node.dir / "pgpass"),
            "authentication": {
                "superuser": {"username": "postgres", "password": "postgres"},
                "replication": {"username": "replicator", "password": "replicator"},
                "rewind": {"username": "rewinder", "password": "rewinder"},
            },
            "parameters": {"unix_socket_directories": str(node.dir)},
            "pg_hba": [
                "local all all trust",
                "host all all 127.0.0.1/32 trust",
                "host replication all 127.0.0.1/32 trust",
            ],
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
    }


class Etcd:
    def __init__(self, root: Path) -> None:
        self.dir = root / "etcd"
        self.port = free_port()
        self.peer = free_port()
        self.daemon: _Daemon | None = None

    def start(self) -> _Daemon:
        client, peer = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{self.peer}"
        self.daemon = _Daemon(
            [
                "etcd",
                "--name=inbox-test",
                f"--data-dir={self.dir}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=inbox-test={peer}",
                "--initial-cluster-state=new",
            ],
            self.dir.parent / "etcd.log",
        )
        return self.daemon

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                return bool(json.loads(r.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def kill(self) -> None:
        if self.daemon is not None:
            self.daemon.kill(signal.SIGKILL)


class Pair:
    """etcd plus two Patroni nodes; ``url`` names both nodes in libpq's netloc form."""

    def __init__(self) -> None:
        self._lay_out()

    def _lay_out(self) -> None:
        """A new folder, and new free ports for etcd and both nodes."""
        self.root = Path(tempfile.mkdtemp(prefix="inbox-patroni-"))
        os.chmod(self.root, 0o755)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        self.etcd = Etcd(self.root)
        self.nodes = [Node(self.root, f"node{i}", self.etcd.port) for i in range(2)]
        if os.geteuid() == 0:
            for path in [self.root, *self.root.rglob("*")]:
                shutil.chown(path, "postgres")

    def url(self, database: str, user: str = "postgres") -> str:
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
        return f"postgresql://{user}@{hosts}/{database}?target_session_attrs=read-write"

    def start(self, timeout: float = 120, attempts: int = 3) -> None:
        """etcd, node0 bootstrapping as primary, then node1 as its synchronous standby.

        Every port is picked free (``free_port``) and bound a moment later by etcd, Patroni's
        REST API or PostgreSQL: in between, one of the machine's own outgoing connections
        may take it as its local port, and the daemon that cannot bind exits (Patroni with
        "Failed to bootstrap cluster" or ``Address already in use``). A start in which a
        daemon exited before it was up is begun again in a new folder on new ports; a daemon
        that runs and is not up in time fails the test with every log."""
        for attempt in range(1, attempts + 1):
            exited = self._start_once(timeout)
            if exited is None:
                return
            name, daemon = exited
            tail = daemon.log_path.read_text(errors="replace")[-1500:]
            why = f"{name} exited before it was up; its log ends:\n{tail}"
            print(f"Patroni pair, attempt {attempt} of {attempts}: {why}")
            if attempt < attempts:  # the last attempt's daemons are the caller's to stop
                self.stop()
                self._lay_out()
        raise AssertionError(f"the Patroni pair did not start in {attempts} attempts: {why}")

    def _start_once(self, timeout: float) -> tuple[str, _Daemon] | None:
        """None once both nodes are up, else the daemon that exited first, by name."""
        daemons: dict[str, _Daemon] = {}

        def up_unless_exited(cond: Any, seconds: float, what: str) -> tuple[str, _Daemon] | None:
            found: list[tuple[str, _Daemon]] = []

            def done() -> bool:
                found[:] = [(n, d) for n, d in daemons.items() if d.popen.poll() is not None]
                return bool(found) or bool(cond())

            assert eventually(done, seconds, 0.1), f"{what} not met in time\n{self.logs()}"
            return found[0] if found else None

        daemons["etcd"] = self.etcd.start()
        if exited := up_unless_exited(self.etcd.healthy, 30, "etcd to answer"):
            return exited
        daemons["node0"] = self.nodes[0].start()
        if exited := up_unless_exited(
            lambda: self.leader() is self.nodes[0], timeout, "node0 to bootstrap as primary"
        ):
            return exited
        daemons["node1"] = self.nodes[1].start()
        return up_unless_exited(
            lambda: self._healthy_leader() is not None,
            timeout,
            "a leader and a streaming synchronous standby",
        )

    def members(self) -> list[dict[str, Any]]:
        """``GET /cluster`` from any node that answers."""
        for node in self.nodes:
            try:
                url = f"http://127.0.0.1:{node.rest}/cluster"
                with urllib.request.urlopen(url, timeout=2) as r:
                    found: list[dict[str, Any]] = json.loads(r.read())["members"]
                    return found
            except (OSError, ValueError, KeyError):
                continue
        return []

    def leader(self) -> Node | None:
        """The node whose PostgreSQL takes writes now (asked directly, not Patroni)."""
        for node in self.nodes:
            if writable(node):
                return node
        return None

    def _healthy_leader(self) -> Node | None:
        """The leader, when both nodes are up: a leader taking writes and a synchronous
        standby streaming from it (Patroni's view and the leader's ``pg_stat_replication``
        agree)."""
        roles = {m.get("role") for m in self.members() if m.get("state") in RUNNING}
        leader = self.leader()
        if not {"leader", "sync_standby"} <= roles or leader is None:
            return None
        try:
            with psycopg.connect(leader.dsn, connect_timeout=1, autocommit=True) as c:
                row = c.execute(
                    "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
                ).fetchone()
        except psycopg.Error:
            return None
        return leader if row is not None and row[0] >= 1 else None

    def wait_healthy(self, timeout: float = 120) -> Node:
        """Both nodes up (``_healthy_leader``); the leader."""
        found: list[Node] = []

        def healthy() -> bool:
            leader = self._healthy_leader()
            found[:] = [leader] if leader is not None else []
            return bool(found)

        wait(healthy, timeout, "a leader and a streaming synchronous standby")
        return found[0]

    def patronictl(self, *args: str) -> str:
        out = subprocess.run(
            _as_postgres(["patronictl", "-c", str(self.nodes[0].config), *args]),
            env=_clean_env(),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    def logs(self) -> str:
        parts = []
        for path in sorted(self.root.rglob("*.log")):
            tail = path.read_text(errors="replace")[-4000:]
            parts.append(f"--- {path.parent.name}/{path.name}\n{tail}")
        return "\n".join(parts)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.etcd.kill()
        # Best effort: a postmaster still running after 30 s is left to the folder's removal.
        eventually(lambda: not any(_running(n.postmaster()) for n in self.nodes), 30, 0.2)
        # Patroni's, PostgreSQL's and etcd's logs outlive the folder, for a failed run.
        kept = Path(__file__).resolve().parent.parent / ".data" / f"patroni-{os.getpid()}"
        shutil.rmtree(kept, ignore_errors=True)
        for path in self.root.rglob("*.log"):
            target = kept / path.relative_to(self.root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        shutil.rmtree(self.root, ignore_errors=True)


def _running(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def writable(node: Node, timeout: float = 1.0) -> bool:
    """The node's PostgreSQL answers and is not in recovery."""
    try:
        with psycopg.connect(node.dsn, connect_timeout=max(1, int(timeout)), autocommit=True) as c:
            row = c.execute("SELECT pg_is_in_recovery()").fetchone()
            return row is not None and row[0] is False
    except psycopg.Error:
        return False


def wait(cond: Any, timeout: float, what: str) -> None:
    wait_for(cond, timeout, what, interval=0.1)
