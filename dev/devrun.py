"""``make run``: set up, then run and supervise the Procfile's processes together.

Uses DATABASE_URL / REDIS_URL when set; otherwise starts an embedded PostgreSQL
and Redis from pip packages (data in ``.data/``). The processes are the same
commands as in production; only the URLs differ. A process that dies is started
again (dev/supervise.py); Ctrl-C or SIGTERM stops every process, then the
embedded servers. Once every process is up, one Ready block says what to do next.
"""

from __future__ import annotations

import errno
import http.client
import os
import secrets
import shlex
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit, urlunsplit

from dev import embedded
from dev.supervise import Child, Supervisor
from inbox.domain.sources import SourceOptions
from inbox.infra import config, keyring
from inbox.store.db.engine import make_engine
from inbox.store.reads import sources as source_reads
from inbox.store.schema import migrate
from inbox.store.write import sources as store
from inbox.store.write import tokens as tokens_store

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("INBOX_DEV_DATA") or ROOT / ".data")
PORT = int(os.environ.get("PORT", "8000"))
READY_TIMEOUT = 120.0


STORES = ("DATABASE_URL", "INBOX_KEYSTORE_URL", "REDIS_URL", "BROKER_URL")
EXPORTS = "exports"  # in DATA: the last Ready block's exports (0600), printed by `make env`


def _urls() -> dict[str, str]:
    env: dict[str, str] = {}
    if not os.environ.get("DATABASE_URL"):
        print(f"DATABASE_URL is not set: starting an embedded PostgreSQL in {DATA / 'pg'}")
        env["DATABASE_URL"] = embedded.start_postgres(DATA / "pg")  # its socket is in .data/pg
    if not os.environ.get("REDIS_URL"):
        print(f"REDIS_URL is not set: starting an embedded Redis in {DATA / 'redis'}")
        env["REDIS_URL"] = embedded.start_redis(DATA / "redis", redis_port(DATA))
    return env


def keystore_beside(database_url: str) -> str:
    """The key store's URL for ``make run``: a database on the same server, named after the
    inbox's with ``_keys``, made when missing (in production it is a database of its own,
    with its own short backup retention: docs/how-to/deploy.md)."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(database_url)
    name = (parts.path.lstrip("/") or "postgres") + "_keys"
    with psycopg.connect(database_url.replace("+psycopg", ""), autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if found is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return urlunsplit(parts._replace(path="/" + name))


def redis_port(data: Path) -> int:
    """The embedded Redis's port, kept in ``data/redis.port`` so that a second shell's
    exports still reach it after a restart; a new one only when that port is taken."""
    kept = data / "redis.port"
    try:
        port = int(kept.read_text())
        if port_is_free(port, "127.0.0.1"):
            return port
    except (OSError, ValueError):
        pass
    port = embedded.free_port()
    kept.write_text(f"{port}\n")
    return port


def recorded_exports(data: Path) -> dict[str, str]:
    try:
        lines = (data / EXPORTS).read_text().splitlines()
    except OSError:
        return {}
    pairs = (shlex.split(line.removeprefix("export ")) for line in lines if "=" in line)
    return dict(p[0].split("=", 1) for p in pairs if p)


def _record_exports(values: dict[str, str]) -> None:
    path = DATA / EXPORTS
    path.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in values.items()))
    path.chmod(0o600)


def answers(url: str) -> bool:
    """Whether the server a URL names takes a connection now (within a few seconds)."""
    try:
        if url.startswith("postgres"):
            import psycopg

            psycopg.connect(url.replace("+psycopg", ""), connect_timeout=3).close()
        elif url.startswith(("redis://", "rediss://")):
            import redis

            redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3).ping()
        else:
            where = urlsplit(url)
            socket.create_connection((where.hostname or "127.0.0.1", where.port or 5672), 3).close()
    except Exception:  # any failure to connect is "does not answer"
        return False
    return True


def stale_exports(data: Path) -> str | None:
    """One line when the shell's store URLs do not answer; None when they all do."""
    dead = [k for k in STORES if os.environ.get(k) and not answers(os.environ[k])]
    if not dead:
        return None
    names = ", ".join(dead)
    recorded = recorded_exports(data)
    if all(os.environ[k] == recorded.get(k) for k in dead):
        return (
            f"{names} in this shell are exports from an earlier make run, and nothing answers"
            f" there now: unset them (unset {' '.join(STORES)}) and run make run again;"
            " while make run runs, eval $(make -s env) gives another shell its exports"
        )
    return (
        f"{names} set in this shell but nothing answers there: start that server, or"
        f" unset {' '.join(dead)} and make run starts an embedded one"
    )


def print_env() -> None:
    """``make env``: the exports of the running (or last) make run, for eval."""
    if not (DATA / EXPORTS).exists():
        sys.exit("no make run has been ready in this checkout yet: run make run first")
    sys.stdout.write((DATA / EXPORTS).read_text())


def _kept_secret(name: str, make: str | None = None) -> str:
    """A secret made once and kept in .data/ (0600), shared by every process."""
    path = DATA / name
    if make is not None or not path.exists():
        path.write_text(make or secrets.token_urlsafe(32))
        path.chmod(0o600)
    return path.read_text().strip()


def _operator_token() -> str:
    """An operator token for the console, made once and kept in .data/operator_token
    (made again if the database no longer knows it, e.g. after .data/pg was removed)."""
    path = DATA / "operator_token"
    engine = make_engine(config.settings(), pool_size=1)
    try:
        with engine.begin() as conn:
            if path.exists() and tokens_store.authenticate(conn, path.read_text().strip()):
                return path.read_text().strip()
            name = f"make-run-{secrets.token_hex(3)}"
            _, secret = tokens_store.create_token(conn, name, "operator", None)
        return _kept_secret("operator_token", secret)
    finally:
        engine.dispose()


def _demo_source() -> tuple[str, str]:
    """The demo tenant's source and its secret (created on first run)."""
    engine = make_engine(config.settings(), pool_size=1)
    try:
        with engine.begin() as conn:
            if not any(t.name == "demo" for t in source_reads.list_tenants(conn)):
                store.create_tenant(conn, "demo")
                store.create_source(
                    conn,
                    "demo",
                    "own",
                    "hmac",
                    [secrets.token_hex(16)],
                    SourceOptions.from_dict(
                        {"event_type_path": "type", "business_key_paths": ["account"]}
                    ),
                )
            src = source_reads.get_source(conn, "demo", "own")
            return src.path, src.secrets[0]
    finally:
        engine.dispose()


def ready_block(path: str, secret: str, token: str, names: list[str]) -> str:
    body = '{"type":"demo.hello","account":"acct-1"}'
    env = os.environ
    exports = "\n".join(
        f"  export {k}={shlex.quote(env[k])}"
        for k in ("DATABASE_URL", "INBOX_KEYSTORE_URL", "REDIS_URL", "BROKER_URL", "INBOX_KEK")
        if env.get(k)
    )
    rule = "=" * 78
    return f"""
{rule}
Ready: {", ".join(names)} are up.

Console:  http://127.0.0.1:{PORT}/ui   (sign in with this operator token,
          kept in .data/operator_token)
          {token}

Send a first signed event (paste into another shell):

  BODY='{body}'; TS=$(date +%s)
  SIG=$(printf '%s.%s' "$TS" "$BODY" | openssl dgst -sha256 -hmac '{secret}' | sed 's/^.* //')
  curl -i -X POST http://127.0.0.1:{PORT}{path} -H 'Content-Type: application/json' \\
       -H "X-Timestamp: $TS" -H "X-Signature: $SIG" -H 'Idempotency-Key: demo-1' -d "$BODY"

The CLI in a second shell (these exports reach this run's database and workers, also
after a restart; eval $(make -s env) sets them):

{exports}
  .venv/bin/inbox events list --tenant demo
  .venv/bin/inbox events show <id from the answer>

Ctrl-C stops everything, the embedded PostgreSQL and Redis too.
{rule}
"""


def _procfile() -> list[tuple[str, str]]:
    out = []
    for line in (ROOT / "Procfile").read_text().splitlines():
        name, sep, cmd = line.partition(":")
        if sep and name.strip() and not name.startswith("#"):
            out.append((name.strip(), cmd.strip()))
    return out


def port_is_free(port: int, host: str = "0.0.0.0") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def _web_up(child: Child) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=1)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


# Set once a signal asked this process to stop: a second one (Ctrl-C again, or make's,
# seen by watch_parent) must not interrupt the stopping itself.
STOPPING = threading.Event()


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    """Until the supervisor runs: SIGINT, SIGTERM or SIGHUP unwind once, through the
    ``finally`` that stops the embedded servers (SIGTERM's default would kill this process
    and leave them running)."""
    if not STOPPING.is_set():
        STOPPING.set()
        raise KeyboardInterrupt(signal.Signals(signum).name)


def catches(pid: int, sig: int) -> bool | None:
    """Whether process ``pid`` has a handler for ``sig`` now (Linux: /proc/PID/status
    ``SigCgt``); None where that cannot be read."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return None


def watch_parent(poll: float = 0.25) -> None:
    """Stop as Ctrl-C does when ``make`` (the parent) was interrupted, or is gone.

    GNU make passes a SIGTERM it receives on to this process, but not a SIGINT: it expects
    the terminal to have sent that to the whole process group, and waits for its children.
    So a script's ``kill -INT <make's pid>`` would stop nothing. make's handler for a fatal
    signal first resets it to the default, so the parent no longer catching SIGINT is the
    sign that it got one."""
    parent = os.getppid()
    caught = catches(parent, signal.SIGINT)

    def watch() -> None:
        while True:
            time.sleep(poll)
            if STOPPING.is_set():
                return
            gone = os.getppid() != parent
            if gone or (caught and catches(parent, signal.SIGINT) is False):
                os.kill(os.getpid(), signal.SIGINT)
                return

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def _on_signal(sup: Supervisor) -> None:
    def handler(signum: int, _frame: FrameType | None) -> None:
        if not sup.stopping.is_set():
            print(f"\n{signal.Signals(signum).name}: stopping every process")
        STOPPING.set()
        sup.stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, handler)


def main() -> None:
    if sys.argv[1:] == ["env"]:
        print_env()
        return
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    watch_parent()
    if stale := stale_exports(DATA):
        sys.exit(stale)
    if not port_is_free(PORT):
        sys.exit(
            f"PORT {PORT} is in use by another process: choose another, e.g. PORT=8001 make run"
        )
    DATA.mkdir(parents=True, exist_ok=True)
    sup: Supervisor | None = None
    try:
        os.environ.update(_urls())
        if not os.environ.get("INBOX_KEYSTORE_URL"):
            os.environ["INBOX_KEYSTORE_URL"] = keystore_beside(os.environ["DATABASE_URL"])
        os.environ.setdefault("PORT", str(PORT))
        os.environ.setdefault("BROKER_URL", os.environ["REDIS_URL"])  # for the Ready block
        os.environ.setdefault("INBOX_PLAYBOOKS", "")
        # On a laptop, callback endpoints are usually local services.
        os.environ.setdefault("INBOX_ALLOW_PRIVATE_TARGETS", "1")
        # Signing secrets are encrypted at rest: a development key kept in .data/ (0600).
        os.environ.setdefault("INBOX_KEK", keyring.dev_key(DATA / "kek"))
        migrate.upgrade(config.reload().migration_url)  # read with the exports above
        path, secret = _demo_source()
        token = _operator_token()
        if config.settings().allow_private_targets:
            print(
                "NOTE: INBOX_ALLOW_PRIVATE_TARGETS is on: callbacks may target loopback and"
                " private\n      addresses. Never set it in production"
                " (set INBOX_ALLOW_PRIVATE_TARGETS=0).\n"
            )
        bin_dir = Path(sys.executable).parent
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        sup = Supervisor(_procfile(), env, ROOT)
        _on_signal(sup)
        sup.start()
        names = [c.name for c in sup.children]
        print(f"starting {', '.join(names)} (their start-up output is held back until ready)")
        late = sup.wait_ready(READY_TIMEOUT, _web_up)
        if not sup.stopping.is_set():
            _record_exports({k: os.environ[k] for k in (*STORES, "INBOX_KEK") if os.environ.get(k)})
            print(ready_block(path, secret, token, names))
            if late:
                print(f"(not up after {READY_TIMEOUT:.0f} s: {', '.join(late)}; see above)")
        sup.run()
    finally:
        if sup is not None:
            sup.stop()
        embedded.stop_all()
        print("stopped")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # stopped before it was up; everything it started is stopped
        sys.exit(130)
