"""``make run``: set up, then run the Procfile's processes (web, worker, beat) together.

Uses DATABASE_URL / REDIS_URL when set; otherwise starts an embedded PostgreSQL
and Redis from pip packages (data in ``.data/``). The processes are the same
commands as in production; only the URLs differ.
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from dev import embedded
from inbox.domain.sources import SourceOptions
from inbox.infra.config import Settings
from inbox.store import migrate
from inbox.store import sources as store
from inbox.store.engine import make_engine

ROOT = Path(__file__).resolve().parent.parent
PORT = int(os.environ.get("PORT", "8000"))


def _urls() -> dict[str, str]:
    env: dict[str, str] = {}
    if not os.environ.get("DATABASE_URL"):
        print("DATABASE_URL is not set: starting an embedded PostgreSQL in .data/pg")
        env["DATABASE_URL"] = embedded.start_postgres(ROOT / ".data" / "pg")
    if not os.environ.get("REDIS_URL"):
        print("REDIS_URL is not set: starting an embedded Redis in .data/redis")
        env["REDIS_URL"] = embedded.start_redis(ROOT / ".data" / "redis")
    return env


def _secret_key() -> str:
    """The console's session key, made once and kept in .data/ (every process shares it)."""
    path = ROOT / ".data" / "secret_key"
    path.parent.mkdir(exist_ok=True)
    if not path.exists():
        path.write_text(secrets.token_urlsafe(32))
        path.chmod(0o600)
    return path.read_text().strip()


def _demo_source() -> tuple[str, str]:
    """The demo tenant's source and its secret (created on first run)."""
    engine = make_engine(Settings.from_env(), pool_size=1)
    try:
        with engine.begin() as conn:
            if not any(t.name == "demo" for t in store.list_tenants(conn)):
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
            src = store.get_source(conn, "demo", "own")
            return src.path, src.secrets[0]
    finally:
        engine.dispose()


def _banner(path: str, secret: str) -> str:
    body = '{"type":"demo.hello","account":"acct-1"}'
    return f"""
Webhook Inbox is starting: web on http://127.0.0.1:{PORT}, a worker and beat.
Send a first signed event (paste into another shell):

  BODY='{body}'; TS=$(date +%s)
  SIG=$(printf '%s.%s' "$TS" "$BODY" | openssl dgst -sha256 -hmac '{secret}' | sed 's/^.* //')
  curl -i -X POST http://127.0.0.1:{PORT}{path} -H 'Content-Type: application/json' \\
       -H "X-Timestamp: $TS" -H "X-Signature: $SIG" -H 'Idempotency-Key: demo-1' -d "$BODY"

Watch it go from received to completed:

  export DATABASE_URL='{os.environ["DATABASE_URL"]}'
  .venv/bin/inbox events list --tenant demo
  .venv/bin/inbox events show <id from the answer>

Ctrl-C stops everything.
"""


def _procfile() -> list[tuple[str, str]]:
    out = []
    for line in (ROOT / "Procfile").read_text().splitlines():
        name, sep, cmd = line.partition(":")
        if sep and name.strip() and not name.startswith("#"):
            out.append((name.strip(), cmd.strip()))
    return out


def _pump(name: str, proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        sys.stdout.write(f"{name:>6} | {raw.decode(errors='replace')}")
        sys.stdout.flush()


def main() -> None:
    os.environ.update(_urls())
    os.environ.setdefault("PORT", str(PORT))
    os.environ.setdefault("INBOX_PLAYBOOKS", "")
    # On a laptop, callback endpoints are usually local services.
    os.environ.setdefault("INBOX_ALLOW_PRIVATE_TARGETS", "1")
    os.environ.setdefault("INBOX_SECRET_KEY", _secret_key())
    (ROOT / ".data").mkdir(exist_ok=True)
    migrate.upgrade(os.environ["DATABASE_URL"])
    path, secret = _demo_source()
    print(_banner(path, secret))
    if Settings.from_env().allow_private_targets:
        print(
            "NOTE: INBOX_ALLOW_PRIVATE_TARGETS is on: callbacks may target loopback and private\n"
            "      addresses. Never set it in production (set INBOX_ALLOW_PRIVATE_TARGETS=0).\n"
        )
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    procs = []
    for name, cmd in _procfile():
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {cmd}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        threading.Thread(target=_pump, args=(name, proc), daemon=True).start()
        procs.append((name, proc))
        print(f"started {name}: {shlex.quote(cmd)}")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        while not stopping.is_set() and all(p.poll() is None for _, p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    for _name, p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for name, p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
        print(f"stopped {name} ({p.returncode})")


if __name__ == "__main__":
    main()
