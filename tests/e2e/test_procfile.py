"""The Procfile as a team runs it: under honcho, from a directory that is not the checkout,
with only the environment docs/how-to/deploy.md lists; and the one line each process says when
it cannot do its job (docs/how-to/deploy.md, inbox/services/startup.py)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from dev.embedded import free_port
from inbox.infra import keyring
from tests.brokers import PrivateRedis
from tests.helpers import body_of, eventually, hmac_headers
from tests.procs import in_group

ROOT = Path(__file__).resolve().parent.parent.parent
BIN = Path(sys.executable).parent
SECRET = "procfile-s3cret"
PLAYBOOK_MODULE = """
from inbox.domain.playbooks import Playbook, register

tell = Playbook("tell")


@tell.step("note", effect=False)
def note(ctx):
    return {"seen": ctx.payload["n"]}


register(tell, event_type="*")
"""


def docs_env(
    tmp: Path, database_url: str, redis_url: str, kek: str | None, keystore: str | None = None
) -> dict[str, str]:
    """The environment docs/how-to/deploy.md lists, and nothing else of this test's."""
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": str(tmp),
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "INBOX_PLAYBOOKS": "my_playbooks",
        # Small, for a 2-core test machine: one web worker, one worker process.
        "WEB_CONCURRENCY": "1",
        "WORKER_CONCURRENCY": "1",
        "COURIER_THREADS": "2",
    }
    if kek is not None:
        env["INBOX_KEK"] = kek
    if keystore is not None:
        env["INBOX_KEYSTORE_URL"] = keystore
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 120):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def inbox(cwd: Path, env: dict[str, str], *args: str) -> str:
    done = run([str(BIN / "inbox"), *args], cwd, env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """What a deployment keeps: the Procfile and a playbook module; no checkout."""
    d = tmp_path / "app"
    d.mkdir()
    shutil.copy(ROOT / "Procfile", d / "Procfile")
    (d / "my_playbooks.py").write_text(PLAYBOOK_MODULE)
    return d


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path / "redis")
    yield server
    server.stop()


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def post(port: int, path: str, body: bytes, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def wait_for(check, timeout: float, what: str, log: Path | None = None):
    seen: list[object] = []

    def probe() -> bool:
        try:
            found = check()
        except OSError:
            found = None
        if found:
            seen.append(found)
        return bool(found)

    if eventually(probe, timeout, 0.2):
        return seen[-1]
    tail = log.read_text(errors="replace")[-4000:] if log is not None else ""
    raise AssertionError(f"{what}: not within {timeout} s\n{tail}")


def event_state(database_url: str, public_id: str) -> str | None:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT state FROM events WHERE public_id = %s", (public_id,)).fetchone()
    return row[0] if row else None


def test_every_procfile_process_runs_under_honcho_from_elsewhere(
    app_dir, empty_db, empty_keystore, redis
):
    pytest.importorskip("honcho", reason="honcho is in the dev extra: pip install -e .[dev]")
    kek = keyring.new_key()
    env = docs_env(app_dir, empty_db, redis.url, kek, empty_keystore)
    # The release step, then a tenant and a source whose playbook the module registers.
    assert "migrated" in inbox(app_dir, env, "migrate")
    inbox(app_dir, env, "tenants", "create", "acme")
    inbox(
        app_dir, env, "sources", "create", "--tenant", "acme", "--name", "billing",
        "--scheme", "hmac", "--secret", SECRET, "--option", "playbook=tell",
    )  # fmt: skip
    listed = inbox(app_dir, env, "playbooks", "list")
    assert "tell" in listed and str(app_dir / "my_playbooks.py") in listed

    port = free_port()
    log = app_dir.parent / "honcho.log"
    with open(log, "wb") as out:
        honcho = subprocess.Popen(
            [str(BIN / "honcho"), "start"],
            cwd=app_dir,
            env={**env, "PORT": str(port)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: get(port, "/readyz")[0] == 200, 90, "/readyz 200", log)
        body = body_of({"n": 7})
        status = post(port, "/hooks/acme/billing", body, hmac_headers(SECRET, body, key="e-1"))
        assert status == 202
        with psycopg.connect(empty_db) as conn:
            (public_id,) = conn.execute("SELECT public_id FROM events").fetchone()
        wait_for(lambda: event_state(empty_db, public_id) == "completed", 90, "completed", log)
        # Payloads are sealed by default (INBOX_KEK and the key store are set): read back
        # through the CLI.
        shown = json.loads(inbox(app_dir, env, "events", "show", public_id, "--json"))
        assert shown["decision"] == {"seen": 7} and shown["sealed"] is True
        # Every process is up (honcho stops them all when one exits), the beat leads.
        wait_for(lambda: "beat: leading" in log.read_text(errors="replace"), 60, "beat", log)
        text = log.read_text(errors="replace")
        for name in ("web.1", "worker.1", "courier.1", "beat.1"):
            assert f"{name} " in text or f"{name}|" in text, name
        assert honcho.poll() is None, text[-4000:]
        assert "exited with code" not in text, text[-4000:]
        assert "Traceback" not in text, text[-4000:]
        assert not list(app_dir.glob("celerybeat-schedule*"))  # beat wrote no file
    finally:
        if honcho.poll() is None:
            honcho.send_signal(signal.SIGTERM)
        try:
            honcho.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(honcho.pid, signal.SIGKILL)
            honcho.wait(10)
            raise
        finally:
            _kill_group(honcho.pid)
    # Nothing of the group is left running.
    assert not _alive_in_group(honcho.pid)


def _alive_in_group(pgid: int) -> list[int]:
    return [pid for pid, state in in_group(pgid).items() if state != "Z"]


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- fail fast: one line, the setting, the fix ---------------------------------------------

PROCESSES = {
    "web": ["python", "-m", "web", "--host", "127.0.0.1"],
    "worker": ["celery", "-A", "workers.app", "worker", "-Q", "inbox", "--concurrency", "1"],
    "beat": ["celery", "-A", "workers.app", "beat"],
}


def start_and_wait(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 90):
    """Run a Procfile command; it must exit by itself (non-zero) within ``timeout``."""
    proc = subprocess.Popen(
        [str(BIN / cmd[0]), *cmd[1:]],
        cwd=cwd,
        env={**env, "PORT": str(free_port())},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, _ = proc.communicate()
        raise AssertionError(f"{cmd[0]} kept running:\n{out[-3000:]}") from None
    return proc.returncode, out


@contextlib.contextmanager
def web_process(app_dir: Path, env: dict[str, str]) -> Iterator[int]:
    """The Procfile's web process on a free port, run from ``app_dir``; its port. Stopped
    with its whole process group after."""
    port = free_port()
    proc = subprocess.Popen(
        [str(BIN / "python"), "-m", "web", "--host", "127.0.0.1"],
        cwd=app_dir,
        env={**env, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        finally:
            _kill_group(proc.pid)


def the_line(out: str) -> str:
    """The process's 'cannot start' line (a JSON log line), and no traceback around it."""
    assert "Traceback" not in out, out
    lines = [ln for ln in out.splitlines() if "cannot start" in ln]
    assert len(lines) == 1, out
    return str(json.loads(lines[0])["message"])


@pytest.fixture
def migrated(migrated_db: str) -> str:
    """A database as ``inbox migrate`` leaves it (the release step itself is run by the
    tests above: under honcho, and late, with the web process waiting)."""
    return migrated_db


def with_a_secret(app_dir: Path, database_url: str, kek: str) -> None:
    env = docs_env(app_dir, database_url, "", kek)
    inbox(app_dir, env, "tenants", "create", "acme")
    inbox(
        app_dir, env, "sources", "create", "--tenant", "acme", "--name", "billing",
        "--scheme", "hmac", "--secret", SECRET,
    )  # fmt: skip


@pytest.mark.parametrize("name", sorted(PROCESSES))
def test_without_the_key_of_stored_secrets_a_process_stops_in_one_line(
    name, app_dir, migrated, redis
):
    with_a_secret(app_dir, migrated, keyring.new_key())
    env = docs_env(app_dir, migrated, redis.url, kek=None)
    code, out = start_and_wait(PROCESSES[name], app_dir, env)
    assert code == 78  # EX_CONFIG
    line = the_line(out)
    assert "INBOX_KEK is not set" in line and "1 signing secret is stored" in line, line
    assert "inbox secrets keygen" in line  # the fix
    assert "[redacted]" not in line


@pytest.mark.parametrize("name", sorted(PROCESSES))
def test_a_playbook_module_that_does_not_import_stops_a_process_in_one_line(
    name, app_dir, migrated, redis
):
    env = {**docs_env(app_dir, migrated, redis.url, keyring.new_key())}
    env["INBOX_PLAYBOOKS"] = "my_playbooks,no_such_playbooks"
    code, out = start_and_wait(PROCESSES[name], app_dir, env)
    assert code == 78  # EX_CONFIG
    line = the_line(out)
    assert "INBOX_PLAYBOOKS" in line and "'no_such_playbooks'" in line, line


def test_an_unreachable_database_stops_a_process_only_when_asked(app_dir, redis):
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing?connect_timeout=2"
    env = {**docs_env(app_dir, dead, redis.url, keyring.new_key())}
    env["INBOX_REQUIRE_DATABASE_AT_START"] = "1"
    for cmd in PROCESSES.values():
        code, out = start_and_wait(cmd, app_dir, env)
        assert code == 69  # EX_UNAVAILABLE
        assert "INBOX_REQUIRE_DATABASE_AT_START" in the_line(out)
    # By default the web process starts and waits; /readyz names the database.
    del env["INBOX_REQUIRE_DATABASE_AT_START"]
    with web_process(app_dir, env) as port:
        status, body = wait_for(lambda: get(port, "/readyz"), 60, "/readyz answers")
        assert status == 503 and json.loads(body)["cause"] == "database"


# Every Procfile process, as the first line of each is read: the courier too.
EVERY = {
    **PROCESSES,
    "courier": ["celery", "-A", "workers.app", "worker", "-Q", "deliveries", "--pool", "threads"],
}


def first_database_line(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict:
    """The first line a running process writes about its database (a JSON log line), read
    as it is written; the process is stopped after."""
    proc = subprocess.Popen(
        [str(BIN / cmd[0]), *cmd[1:]],
        cwd=cwd,
        env={**env, "PORT": str(free_port())},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # ends when the process does: then the assert says why
            seen.append(line)
            if "database" in line:
                return json.loads(line)  # a JSON line, as every other line of every process
        raise AssertionError(f"{cmd[0]} said nothing of its database:\n{''.join(seen)}")
    finally:
        _kill_group(proc.pid)
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_database_that_does_not_exist_is_named_in_the_first_line_and_the_exit(
    app_dir, pg_server_url, redis
):
    """A misspelled database name: the server's reason in each process's first line about
    its database, in /readyz, and in the exit-69 line, with the fix (not "start it")."""
    missing = pg_server_url.rsplit("/", 1)[0] + "/inbox_misspelled"
    reason = 'database "inbox_misspelled" does not exist'
    env = {**docs_env(app_dir, missing, redis.url, keyring.new_key())}
    for name, cmd in EVERY.items():
        line = first_database_line(cmd, app_dir, env)
        assert reason in line["message"], (name, line)
        assert "correct its name in DATABASE_URL" in line["message"], (name, line)
    with web_process(app_dir, env) as port:
        status, body = wait_for(lambda: get(port, "/readyz"), 60, "/readyz answers")
        assert status == 503 and json.loads(body)["checks"]["database"] == f"refused: {reason}"
    env["INBOX_REQUIRE_DATABASE_AT_START"] = "1"
    for name, cmd in EVERY.items():
        code, out = start_and_wait(cmd, app_dir, env)
        assert code == 69, (name, out)  # EX_UNAVAILABLE
        line = the_line(out)
        assert f"refuses the connection: {reason}; create it, or correct its name" in line, line
        assert "start the database first" not in line


def test_a_schema_not_migrated_yet_is_waited_for_not_a_reason_to_stop(app_dir, empty_db, redis):
    env = docs_env(app_dir, empty_db, redis.url, keyring.new_key())
    env["INBOX_REQUIRE_DATABASE_AT_START"] = "1"  # the database answers: it is not the cause
    with web_process(app_dir, env) as port:
        status, body = wait_for(lambda: get(port, "/readyz"), 60, "/readyz answers")
        assert status == 503 and json.loads(body)["cause"] == "schema"
        inbox(app_dir, env, "migrate")  # the release step, run late
        wait_for(lambda: get(port, "/readyz")[0] == 200, 60, "/readyz 200 once migrated")


def test_readyz_is_503_and_says_secrets_when_the_key_is_not_theirs(app_dir, migrated, redis):
    with_a_secret(app_dir, migrated, keyring.new_key())
    env = docs_env(app_dir, migrated, redis.url, keyring.new_key())  # another key
    with web_process(app_dir, env) as port:
        status, body = wait_for(lambda: get(port, "/readyz"), 60, "/readyz answers")
        doc = json.loads(body)
        assert status == 503 and doc["cause"] == "secrets", doc
        assert "INBOX_KEK" in doc["checks"]["secrets"]
        # And an event is refused 503, never accepted: not "ready" while events get 5xx.
        body_ = body_of({"n": 1})
        assert post(port, "/hooks/acme/billing", body_, hmac_headers(SECRET, body_)) == 503


def test_a_cli_command_that_needs_the_key_says_so_in_one_line(app_dir, migrated):
    with_a_secret(app_dir, migrated, keyring.new_key())
    env = docs_env(app_dir, migrated, "", kek=None)
    done = run([str(BIN / "inbox"), "sources", "list"], app_dir, env)
    assert done.returncode != 0
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert "INBOX_KEK is not set" in done.stderr and "inbox secrets keygen" in done.stderr
