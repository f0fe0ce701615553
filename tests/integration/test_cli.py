"""The CLI as an on-call engineer meets it: tables, --json, one-line errors with the fix,
``sources update`` with validation, one spelling for rotate."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner

from inbox.cli import main
from tests.helpers import body_of, hmac_headers

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture
def cli(database_url):
    runner = CliRunner()

    def run(*args: str, ok: bool = True) -> str:
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert (result.exit_code == 0) == ok, result.output
        return result.output

    return run


def _columns(out: str) -> list[list[str]]:
    """A table's rows split at its header's column starts (values may hold spaces)."""
    lines = out.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    bounds = [*starts[1:], None]
    return [[line[a:b].strip() for a, b in zip(starts, bounds, strict=True)] for line in lines]


def test_events_list_is_a_table_with_iso_times_and_json(cli, client, make_source):
    src = make_source(event_type_path="type")
    for i in range(2):
        body = body_of({"type": f"t.{i}"})
        client.post(src.path, data=body, headers=hmac_headers("s3cret", body, f"k{i}"))
    rows = _columns(cli("events", "list", "--tenant", src.tenant))
    assert rows[0] == ["EVENT", "SOURCE", "TYPE", "STATE", "ATTEMPTS", "RECEIVED", "ERROR"]
    assert [r[2] for r in rows[1:]] == ["t.1", "t.0"]
    assert all(ISO.match(r[5]) for r in rows[1:])
    listed = json.loads(cli("events", "list", "--tenant", src.tenant, "--json"))
    assert [e["event_type"] for e in listed] == ["t.1", "t.0"]
    assert listed[0]["received_at"].endswith("Z")


def test_events_show_is_a_summary_without_lease_internals(cli, client, make_source):
    src = make_source(event_type_path="type")
    body = body_of({"type": "sim.swap"})
    public_id = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k")).json[
        "id"
    ]
    client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k"))  # a duplicate
    out = cli("events", "show", public_id)
    assert "fence" not in out and "lease_owner" not in out
    lines = dict(line.split(None, 1) for line in out.splitlines() if line and " " in line)
    assert lines["event"] == public_id and lines["type"] == "sim.swap"
    assert lines["state"] == "received" and lines["attempts"] == "0 of 5"
    assert ISO.match(lines["received"])
    assert lines["duplicates"].startswith("1 (first ")
    shown = json.loads(cli("events", "show", public_id, "--json"))
    assert shown["public_id"] == public_id and shown["duplicate_count"] == 1
    assert not {"fence", "lease_owner", "lease_expires_at", "id"} & set(shown)


def test_every_list_and_show_speaks_json(cli, make_source):
    src = make_source(tenant="acme", name="billing")
    cli("tokens", "create", "--name", "ops", "--role", "operator")
    cli("endpoints", "create", "--tenant", "acme", "--url", "https://example.com/h")
    assert [t["name"] for t in json.loads(cli("tenants", "list", "--json"))] == ["acme"]
    assert json.loads(cli("sources", "list", "--json"))[0]["source"] == "acme/billing"
    one = json.loads(cli("sources", "show", src.tenant + "/" + src.name, "--json"))
    assert one["active_secrets"] == 1 and "s3cret" not in json.dumps(one)
    (endpoint,) = json.loads(cli("endpoints", "list", "--json"))
    assert endpoint["url"] == "https://example.com/h" and endpoint["active_secrets"] == 1
    assert json.loads(cli("endpoints", "show", endpoint["endpoint"], "--json"))["tenant"] == "acme"
    assert json.loads(cli("deliveries", "list", "--json")) == []
    (token,) = json.loads(cli("tokens", "list", "--json"))
    assert token["name"] == "ops" and token["created_at"].endswith("Z")


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and re.match(r"^inbox, version \d+\.\d+", result.output)


def _one_line_error(args: list[str], env: dict[str, str]) -> str:
    """Run the real ``inbox`` command in a fresh process: exit 1, one line, no traceback."""
    full = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | env
    proc = subprocess.run(
        [sys.executable, "-m", "inbox.cli", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_a_missing_database_url_is_one_line_with_the_fix():
    line = _one_line_error(["events", "list"], {})
    assert "DATABASE_URL is not set: export it, for example export DATABASE_URL=" in line
    assert "eval $(make -s env)" in line  # the exports of a running make run


@pytest.fixture
def unmigrated_url(pg_server_url: str) -> Iterator[str]:
    name = f"inbox_unmigrated_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = pg_server_url.partition("?")
    yield base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_an_unmigrated_database_says_run_inbox_migrate(unmigrated_url):
    line = _one_line_error(["events", "list"], {"DATABASE_URL": unmigrated_url})
    assert "the schema is not migrated" in line and "run inbox migrate" in line


def test_an_unreachable_database_is_one_line_without_the_password():
    url = "postgresql://ops:hunter2@127.0.0.1:1/inbox?connect_timeout=2"
    line = _one_line_error(["sources", "list"], {"DATABASE_URL": url})
    assert "cannot reach the database" in line and "hunter2" not in line


def test_sources_update_validates_and_changes(cli, make_source):
    make_source(tenant="acme", name="billing")
    ref = "acme/billing"
    out = cli("sources", "update", ref, "--option", "tolerence=60", ok=False)
    assert "Unknown source option 'tolerence'" in out and "tolerance" in out.split("Valid")[1]
    out = cli("sources", "update", ref, "--body-schema", '{"account": "strng"}', ok=False)
    assert "Invalid body_schema" in out and "strng" in out
    changed = json.loads(
        cli(
            "sources",
            "update",
            ref,
            "--option",
            "tolerance=60",
            "--playbook",
            "forward",
            "--body-schema",
            '{"account": "str", "n": "int?"}',
            "--disable",
            "--json",
        )
    )
    assert changed["enabled"] is False
    assert changed["options"] == {
        "tolerance": 60,
        "playbook": "forward",
        "body_schema": {"account": "str", "n": "int?"},
    }
    again = json.loads(cli("sources", "update", ref, "--unset", "tolerance", "--enable", "--json"))
    assert again["enabled"] is True and "tolerance" not in again["options"]


def test_a_playbook_name_is_checked_at_create_and_update(cli, make_source, monkeypatch):
    make_source(tenant="acme", name="billing")
    create = ["sources", "create", "--tenant", "acme", "--scheme", "none"]
    monkeypatch.delenv("INBOX_PLAYBOOKS", raising=False)
    out = cli(*create, "--name", "x", "--option", "playbook=deny-acount", ok=False)
    assert out.count("\n") == 1 and "INBOX_PLAYBOOKS is not set" in out, out
    # The built-in playbooks are named (others a test module registered may be listed too).
    assert "'deny-acount'" in out and "forward" in out and "record" in out
    out = cli("sources", "update", "acme/billing", "--playbook", "deny-acount", ok=False)
    assert "INBOX_PLAYBOOKS is not set" in out
    monkeypatch.setenv("INBOX_PLAYBOOKS", "tests.sink_playbooks")
    out = cli("sources", "update", "acme/billing", "--playbook", "deny-acount", ok=False)
    assert "registered by INBOX_PLAYBOOKS (tests.sink_playbooks)" in out and "deny," in out
    assert "Traceback" not in out
    cli("sources", "update", "acme/billing", "--playbook", "deny")
    cli(*create, "--name", "y", "--option", "playbook=deny")
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        names = conn.execute(
            "SELECT name, options->>'playbook' FROM sources ORDER BY name"
        ).fetchall()
    assert names == [("billing", "deny"), ("y", "deny")]  # nothing stored for the refusals


def test_playbooks_list_says_what_is_loaded_and_from_where(cli, monkeypatch):
    monkeypatch.delenv("INBOX_PLAYBOOKS", raising=False)
    out = cli("playbooks", "list")
    assert out.startswith("INBOX_PLAYBOOKS is not set")
    monkeypatch.setenv("INBOX_PLAYBOOKS", "tests.sink_playbooks")
    doc = json.loads(cli("playbooks", "list", "--json"))
    assert doc["modules"] == ["tests.sink_playbooks"]
    by_name = {p["name"]: p for p in doc["playbooks"]}
    assert by_name["deny"]["module"] == "tests.sink_playbooks"
    assert by_name["deny"]["file"].endswith("tests/sink_playbooks.py")
    assert by_name["record"]["module"] == "inbox.domain.playbooks"
    monkeypatch.setenv("INBOX_PLAYBOOKS", "tests.sink_playbooks,tests.no_such_module")
    out = cli("playbooks", "list", ok=False)
    assert out.count("\n") == 1 and "'tests.no_such_module' does not import" in out


def test_an_invalid_body_schema_is_refused_at_create(cli, make_source):
    make_source(tenant="acme", name="first")
    out = cli(
        "sources",
        "create",
        "--tenant",
        "acme",
        "--name",
        "billing",
        "--scheme",
        "hmac",
        "--secret",
        "x",
        "--option",
        'body_schema={"id": "number"}',
        ok=False,
    )
    assert "Invalid body_schema" in out
    assert "acme/billing" not in cli("sources", "list")


def test_rotate_is_spelled_the_same_for_sources_and_endpoints(cli, make_source):
    make_source(tenant="acme", name="billing")
    cli("endpoints", "create", "--tenant", "acme", "--url", "https://example.com/h")
    (endpoint,) = json.loads(cli("endpoints", "list", "--json"))
    ep = endpoint["endpoint"]
    new = cli("endpoints", "rotate", ep).split()[-1]
    assert json.loads(cli("endpoints", "show", ep, "--json"))["active_secrets"] == 2
    assert "revoked 1" in cli("endpoints", "rotate", ep, "--finish", "--secret", new)
    assert json.loads(cli("endpoints", "show", ep, "--json"))["active_secrets"] == 1
    cli("sources", "rotate", "acme/billing", "--secret", "two")
    assert "revoked 1" in cli("sources", "rotate", "acme/billing", "--finish", "--secret", "two")
    assert "--finish needs --secret" in cli("endpoints", "rotate", ep, "--finish", ok=False)
