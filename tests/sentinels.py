"""A Redis master, a replica and three Sentinels of a test's own, on free ports.

Debian's ``redis-server`` and ``redis-sentinel``, on 127.0.0.1, files in a temporary
folder, stopped by their pids: never the shared Redis. ``kill_master`` loses the master's
node (SIGKILL, never restarted); the Sentinels promote the replica.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import redis

from dev.embedded import free_port
from tests.helpers import eventually

MASTER_NAME = "inbox"


def available() -> str | None:
    """None when the stack can run here; else why not (a test's skip reason)."""
    for exe, package in (("redis-server", "redis-server"), ("redis-sentinel", "redis-sentinel")):
        if shutil.which(exe) is None:
            return f"{exe} is not installed (Debian: apt-get install {package})"
    return None


class SentinelStack:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.master_port, self.replica_port = free_port(), free_port()
        self._redis(self.master_port)
        self._redis(self.replica_port, "--replicaof", "127.0.0.1", str(self.master_port))
        self.sentinel_ports = [free_port() for _ in range(3)]
        for port in self.sentinel_ports:
            conf = root / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {root}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master_port} 2\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
                f"sentinel failover-timeout {MASTER_NAME} 10000\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n"
            )
            self.procs[port] = subprocess.Popen(
                ["redis-sentinel", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        self.url = (
            ";".join(f"sentinel://127.0.0.1:{p}" for p in self.sentinel_ports)
            + f"/0?master_name={MASTER_NAME}"
        )
        # Each Sentinel must know the other two and the replica before the master may go: a
        # failover needs a quorum of Sentinels that have found each other (through the
        # master's hello channel) and a replica the elected one knows of.
        self._until(
            lambda: self.replica_linked() and self.sentinels_agree() and self.sentinels_met(),
            "the stack",
            90,
        )

    def _redis(self, port: int, *args: str) -> None:
        self.procs[port] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.root), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    @staticmethod
    def _until(cond, what: str, seconds: float = 60) -> None:
        def holds() -> bool:
            try:
                return bool(cond())
            except redis.RedisError:
                return False

        if not eventually(holds, seconds, interval=0.1):
            raise RuntimeError(f"the private Sentinel stack: no {what} within {seconds} s")

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)

    def replica_linked(self) -> bool:
        info = self.client(self.replica_port).info("replication")
        return info.get("master_link_status") == "up"

    def master_at(self, sentinel_port: int) -> int:
        _host, port = self.client(sentinel_port).execute_command(
            "SENTINEL", "get-master-addr-by-name", MASTER_NAME
        )
        return int(port)

    def sentinels_agree(self, port: int | None = None) -> bool:
        want = self.master_port if port is None else port
        return all(self.master_at(s) == want for s in self.sentinel_ports)

    def sentinels_met(self) -> bool:
        """Every Sentinel knows every other one, and the replica (learned from the
        master's INFO, every 10 s): a Sentinel elected to fail over that knows no replica
        has none to promote."""
        others = len(self.sentinel_ports) - 1
        for port in self.sentinel_ports:
            with redis.Redis(host="127.0.0.1", port=port, socket_timeout=2) as r:
                if len(r.execute_command("SENTINEL", "SENTINELS", MASTER_NAME)) < others:
                    return False
                if not r.execute_command("SENTINEL", "REPLICAS", MASTER_NAME):
                    return False
        return True

    def kill_master(self) -> None:
        """The master's node is lost; wait for every Sentinel to name the replica."""
        proc = self.procs.pop(self.master_port)
        proc.kill()
        proc.wait(10)
        self._until(lambda: self.sentinels_agree(self.replica_port), "promotion", 60)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        self.procs.clear()
        shutil.rmtree(self.root, ignore_errors=True)
