"""What docs/how-to/upgrade.md says a process sees of a schema that is not its code's.

Behind (new code, the migration not run yet): ``/readyz`` answers 503 ``schema`` and names
both revisions; ``inbox migrate`` brings it to head. Ahead (old code still running after
the new version's ``inbox migrate``): ``/readyz`` of the old code answers 503 ``schema``
too, and ``inbox migrate`` run with the old code refuses, naming the revision it does not
know, and changes nothing.
"""

from __future__ import annotations

import os
import subprocess

import psycopg
from click.testing import CliRunner

from inbox.cli import main
from inbox.infra.config import Settings
from inbox.store.db.engine import make_engine
from inbox.store.schema import migrate
from tests.procs import BIN
from web import create_app

NEXT = "0999_next_release"  # a revision of a newer version, unknown to this code


def ready(url: str) -> tuple[int, dict]:
    engine = make_engine(Settings(database_url=url))
    try:
        resp = (
            create_app(Settings(database_url=url), engine=engine, doorbell=lambda: None)
            .test_client()
            .get("/readyz")
        )
        return resp.status_code, resp.json
    finally:
        engine.dispose()


def version(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")]


def test_code_ahead_of_its_schema_is_not_ready_until_inbox_migrate(empty_db, monkeypatch):
    head = migrate.head_revision()
    migrate.upgrade(empty_db, "0025_invariants")
    status, body = ready(empty_db)
    assert status == 503 and body["cause"] == "schema"
    assert body["checks"]["schema"] == (
        f"at 0025_invariants, the code needs {head} (run inbox migrate)"
    )
    monkeypatch.setenv("DATABASE_URL", empty_db)
    monkeypatch.delenv("INBOX_MIGRATE_DATABASE_URL", raising=False)
    result = CliRunner().invoke(main, ["migrate"])
    assert result.exit_code == 0 and result.output == f"migrated to head ({head})\n", result.output
    assert version(empty_db) == [head]
    assert ready(empty_db) == (200, ready(empty_db)[1]) and ready(empty_db)[1]["status"] == "ok"


def test_old_code_on_a_newer_schema_stays_ready_and_its_migrate_refuses_plainly(
    migrated_db, monkeypatch
):
    """A rolling upgrade migrates first, then replaces the processes one by one: the old
    ones keep serving meanwhile (a load balancer must not drop them all at once), and
    say why; the old release's ``inbox migrate`` says the database is newer, not a bug."""
    head = migrate.head_revision()
    with psycopg.connect(migrated_db, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = %s", (NEXT,))
    status, body = ready(migrated_db)
    assert status == 200 and body["status"] == "ok", body
    assert body["checks"]["schema"].startswith(
        f"ahead: at {NEXT}, newer than this release's {head}"
    )
    assert body["checks"]["secrets"] == "ok"  # the other checks still run
    monkeypatch.setenv("DATABASE_URL", migrated_db)
    monkeypatch.delenv("INBOX_MIGRATE_DATABASE_URL", raising=False)
    result = CliRunner().invoke(main, ["migrate"])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: the database is at {NEXT}, newer than this"), (
        result.output
    )
    assert "bug" not in result.output and "nothing was changed" in result.output
    assert version(migrated_db) == [NEXT]


def test_two_migrates_at_once_leave_the_schema_at_head(empty_db):
    """Every revision is applied in one transaction: of two ``inbox migrate`` started
    together on an empty database, one migrates and the other fails on a duplicate and
    changes nothing (the ``inbox-migrate`` unit tries again, and finds the head). Alembic
    takes no lock: when both succeed, it was because one finished before the other began."""
    env = {**os.environ, "DATABASE_URL": empty_db}
    env.pop("INBOX_MIGRATE_DATABASE_URL", None)
    command = [str(BIN / "inbox"), "migrate"]
    out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    procs = [subprocess.Popen(command, env=env, **out) for _ in range(2)]
    results = [(p.communicate(timeout=120)[0], p.returncode) for p in procs]
    results = [(code, out) for out, code in results]
    done = f"migrated to head ({migrate.head_revision()})\n"
    assert any(code == 0 and out == done for code, out in results), results
    for code, out in results:
        assert code == 0 or out.startswith("Error: database error"), results
    assert version(empty_db) == [migrate.head_revision()]
    again = subprocess.run([str(BIN / "inbox"), "migrate"], env=env, capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout == done
