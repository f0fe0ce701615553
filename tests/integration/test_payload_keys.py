"""Payloads sealed at rest (envelope encryption) and erased by destroying their keys,
against real PostgreSQL: what is stored is ciphertext, every reader sees the payload, the
digests are the plaintext's; an erasure keeps every row and its evidence, a legal hold
refuses it, a tenant-wide one takes two operators; the keys live in a key store of their
own, so a dump of the inbox's database taken before an erasure, restored after it, opens
nothing with the KEK in force; an erasure cut short between the two databases resumes;
KEK rotation rewraps the key store and rewrites no payload; the sealing job resumes after
a crash."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text

from inbox import Playbook, StepContext, register
from inbox.cli import main
from inbox.infra import envelope
from inbox.infra import keyring as kr
from inbox.infra.config import Settings
from inbox.services import erasure
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.db import keystore, sealing
from inbox.store.db.engine import make_engine
from inbox.store.write import tokens as tstore
from tests.helpers import body_of, hmac_headers, wait_for
from tests.integration.ui_support import CSRF, grab, new_token, sign_in

SECRET = "s3cret"
SEEN = register(Playbook("payload-keys-seen"), event_type="person.changed")


@SEEN.step("look")
def look(ctx: StepContext) -> dict[str, str]:
    return {"name": str(ctx.payload.get("name"))}


@pytest.fixture
def keys(engine: Engine) -> Iterator[sealing.PayloadKeys]:
    """Sealing on for this test's engine (the suite stores in clear), its cache emptied
    before and after (the tables are emptied between tests, ids start again)."""
    found = sealing.for_engine(engine)
    found.clear()
    _empty_keystore()
    was = found.enabled
    found.enabled = True
    yield found
    found.enabled = was
    found.clear()


def _sealed_text(stored: object) -> bool:
    """A value stored sealed: a JSON string of base64 whose bytes hold no "Roe". The bytes,
    not the base64 text: three letters turn up in random base64 about once in 4,000
    results of this size, and did once in CI; in the sealed bytes about once in 350,000."""
    if not isinstance(stored, str):
        return False
    return b"Roe" not in base64.b64decode(stored, validate=True)


def _empty_keystore() -> None:
    """The worker's key store emptied (it outlives the tables emptied between tests)."""
    with keystore.current().engine.begin() as conn:
        keystore.current().ensure_schema()
        conn.execute(text("DELETE FROM data_keys"))


def in_keystore(key_ids) -> dict[int, str]:
    """The key store's wrapped keys among ``key_ids``."""
    with keystore.current().engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id, wrapped FROM data_keys WHERE id = ANY(:ids)"), {"ids": list(key_ids)}
        )
        return {int(r.id): str(r.wrapped) for r in rows}


def cli(*args: str, ok: bool = True) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert (result.exit_code == 0) == ok, result.output
    return result.output


def token(engine: Engine, name: str) -> dict[str, str]:
    with engine.begin() as conn:
        _, secret = tstore.create_token(conn, name, "operator", None)
    return {"Authorization": f"Bearer {secret}"}


def person(name: str, account: str) -> dict[str, object]:
    return {"type": "person.changed", "account": account, "name": name}


def post(client, src, payload: dict[str, object], key: str) -> str:
    body = body_of(payload)
    resp = client.post(src.path, data=body, headers=hmac_headers(SECRET, body, key))
    assert resp.status_code == 202, resp.data
    return str(resp.json["id"])


def stored(engine: Engine, public_id: str):
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT id, body, headers, headers_sealed, key_id, body_sha256, state"
                " FROM events WHERE public_id = :p"
            ),
            {"p": public_id},
        ).one()


def detail(client, engine: Engine, public_id: str) -> dict:
    resp = client.get(f"/api/v1/events/{public_id}", headers=token(engine, f"r-{uuid4().hex}"))
    assert resp.status_code == 200, resp.data
    return dict(resp.json)


def subject_source(make_source):
    return make_source(event_type_path="type", subject_path="account")


def test_stored_sealed_read_in_clear_and_cached(client, make_source, engine, keys, settings):
    src = subject_source(make_source)
    jane = person("Jane Roe", "acct-1")
    first = post(client, src, jane, "k1")
    row = stored(engine, first)
    assert row.key_id is not None and b"Jane" not in bytes(row.body)
    assert row.headers == {} and b"content-type" not in bytes(row.headers_sealed)
    assert bytes(row.body_sha256) == hashlib.sha256(body_of(jane)).digest()  # the plaintext's
    shown = detail(client, engine, first)
    assert json.loads(shown["body"]) == jane and shown["sealed"] is True
    assert shown["headers"]["content-type"] == "application/json" and shown["erased"] is None

    misses = keys.misses
    second = post(client, src, person("Jane Roe", "acct-1"), "k2")  # the same subject
    assert keys.misses == misses  # the cached key: no round trip to data_keys
    assert stored(engine, second).key_id == row.key_id
    other = post(client, src, person("Rob Poe", "acct-2"), "k3")  # another subject's key
    assert stored(engine, other).key_id != row.key_id
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM data_keys")).scalar_one() == 2

    wsettings = Settings(database_url=settings.database_url, batch_size=10)
    wait_for(
        lambda: drain_once(Runtime(wsettings, engine)).claimed == 0 and _all_done(engine),
        60,
        "done",
    )
    with engine.connect() as conn:
        stored_steps = conn.execute(text("SELECT result, key_id FROM steps ORDER BY event_id"))
        stored_steps = stored_steps.all()
    # Step results are sealed under their event's key: no name in the table.
    assert [s.key_id for s in stored_steps] == [
        row.key_id,
        row.key_id,
        stored(engine, other).key_id,
    ]
    assert all(_sealed_text(s.result) for s in stored_steps)
    seen = [detail(client, engine, i)["steps"][0]["result"] for i in (first, second, other)]
    assert seen == [{"name": "Jane Roe"}, {"name": "Jane Roe"}, {"name": "Rob Poe"}]
    # The decision (the last step's result by default) likewise.
    with engine.connect() as conn:
        decisions = [r[0] for r in conn.execute(text("SELECT decision FROM events"))]
    assert all(_sealed_text(d) for d in decisions)
    assert detail(client, engine, first)["decision"] == {"name": "Jane Roe"}


def _all_done(engine: Engine) -> bool:
    with engine.connect() as conn:
        return not conn.execute(
            text("SELECT count(*) FROM events WHERE state IN ('received', 'processing')")
        ).scalar_one()


def _finish(engine: Engine) -> None:
    """Every event run to its end by the worker's own drain."""
    wsettings = Settings(database_url=engine.url.render_as_string(False), batch_size=10)
    wait_for(
        lambda: drain_once(Runtime(wsettings, engine)).claimed == 0 and _all_done(engine),
        60,
        "done",
    )


def test_subject_erasure_keeps_rows_and_evidence(
    client, make_source, engine, keys, tmp_path: Path, monkeypatch
):
    src = subject_source(make_source)
    jane = person("Jane Roe", "acct-1")
    gone = post(client, src, jane, "k1")
    kept = post(client, src, person("Rob Poe", "acct-2"), "k2")
    _finish(engine)
    before = stored(engine, gone)

    said = cli(
        "erase",
        "--tenant",
        src.tenant,
        "--subject",
        "acct-1",
        "--reason",
        "GDPR-17",
        "--actor",
        "dpo",
        "--json",
    )
    done = json.loads(said)
    assert done["status"] == "done" and done["keys_destroyed"] == 1 and done["events"] == 1

    after = stored(engine, gone)  # the row, its sealed bytes and its digest stay
    assert bytes(after.body) == bytes(before.body) and after.body_sha256 == before.body_sha256
    with engine.connect() as conn:
        destroyed = conn.execute(
            text("SELECT destroyed_by FROM data_keys WHERE id = :k"), {"k": after.key_id}
        ).scalar_one()
        audit = conn.execute(
            text("SELECT actor, action FROM audit_log WHERE subject_kind = 'erasure' ORDER BY id")
        ).all()
    assert destroyed == "dpo" and in_keystore([after.key_id]) == {}  # gone from the key store
    assert len(in_keystore([stored(engine, kept).key_id])) == 1  # the other subject's stays
    assert [(a.actor, a.action) for a in audit] == [("dpo", "erasure_requested"), ("dpo", "erased")]
    shown = detail(client, engine, gone)
    assert shown["body"] is None and shown["headers"] == {}
    assert shown["erased"]["by"] == "dpo" and shown["erased"]["erasure"] == done["id"]
    assert json.loads(detail(client, engine, kept)["body"])["name"] == "Rob Poe"

    key = tmp_path / "export.pem"
    cli("evidence", "keygen", str(key))
    monkeypatch.setenv("INBOX_EVIDENCE_KEY_FILE", str(key))
    out = tmp_path / "bundles"
    cli("events", "export", gone, "--out", str(out))
    bundle = out / gone
    assert "verified" in cli("evidence", "verify", str(bundle), "--public-key", f"{key}.pub")
    event = json.loads((bundle / "event.json").read_text())
    assert event["body_stored"] == "erased" and event["erased"]["by"] == "dpo"
    assert event["body_sha256"] == hashlib.sha256(body_of(jane)).hexdigest()
    verdict = json.loads((bundle / "verification.json").read_text())
    assert verdict["verified"] is True and verdict["raw_sha256"] == event["body_sha256"]
    assert (bundle / "body.bin").read_bytes() == b""


def test_a_legal_hold_refuses_the_erasure_naming_the_hold(client, make_source, engine, keys):
    src = subject_source(make_source)
    held = post(client, src, person("Jane Roe", "acct-1"), "k1")
    _finish(engine)
    alice = token(engine, "alice")
    hold = client.post(
        "/api/v1/holds",
        json={"tenant": src.tenant, "reason": "case 7", "event": held},
        headers=alice,
    ).json["id"]
    resp = client.post(
        "/api/v1/erasures",
        json={"tenant": src.tenant, "reason": "GDPR", "subject": "acct-1"},
        headers=alice,
    )
    assert resp.status_code == 409 and resp.json["error"]["code"] == "erasure_held"
    assert hold in resp.json["error"]["message"] and resp.json["error"]["holds"] == [hold]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM erasures")).scalar_one() == 0
        assert (
            conn.execute(
                text("SELECT count(*) FROM data_keys WHERE destroyed_at IS NULL")
            ).scalar_one()
            == 1
        )
    assert json.loads(detail(client, engine, held)["body"])["name"] == "Jane Roe"

    bob = token(engine, "bob")
    assert client.post(f"/api/v1/holds/{hold}/release", headers=alice).status_code == 200
    again = client.post(
        "/api/v1/erasures",
        json={"tenant": src.tenant, "reason": "GDPR", "subject": "acct-1"},
        headers=bob,
    )
    assert again.status_code == 201 and again.json["events"] == 1
    assert detail(client, engine, held)["body"] is None


def test_a_tenant_wide_erasure_takes_two_operators(client, make_source, engine, keys):
    src = make_source()  # no subject_path: the tenant's own key
    ids = [post(client, src, {"n": n}, f"k{n}") for n in range(3)]
    _finish(engine)
    alice, bob = token(engine, "alice"), token(engine, "bob")
    asked = client.post(
        "/api/v1/erasures", json={"tenant": src.tenant, "reason": "offboarding"}, headers=alice
    )
    assert asked.status_code == 202 and asked.json["status"] == "awaiting_approval"
    era = asked.json["id"]
    assert all(detail(client, engine, i)["body"] is not None for i in ids)  # nothing yet
    own = client.post(f"/api/v1/erasures/{era}/approve", headers=alice)
    assert own.status_code == 403
    assert all(detail(client, engine, i)["body"] is not None for i in ids)
    done = client.post(f"/api/v1/erasures/{era}/approve", headers=bob)
    assert done.status_code == 200 and done.json["status"] == "done"
    assert done.json["approved_by"] == "bob" and done.json["events"] == 3
    assert all(detail(client, engine, i)["erased"]["erasure"] == era for i in ids)
    twice = client.post(f"/api/v1/erasures/{era}/approve", headers=bob)
    assert twice.status_code == 409
    # The tenant's next payload is sealed under a new key, readable.
    later = post(client, src, {"n": 9}, "k9")
    assert json.loads(detail(client, engine, later)["body"]) == {"n": 9}


def _psql(url: str) -> str:
    return url.replace("+psycopg", "")


@pytest.fixture
def scratch_url(database_url: str) -> Iterator[str]:
    """An empty database beside the test's, to restore a dump into."""
    name = f"inbox_restore_{uuid4().hex[:8]}"
    admin = _psql(database_url)
    subprocess.run(["psql", "-q", admin, "-c", f'CREATE DATABASE "{name}"'], check=True)
    yield database_url.rsplit("/", 1)[0] + f"/{name}"
    subprocess.run(
        ["psql", "-q", admin, "-c", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], check=True
    )


def _restored_payload(url: str, public_id: str) -> sealing.Opened:
    """The payload of ``public_id`` as the inbox reads it from the database at ``url``,
    with the KEK and the key store in force and nothing cached."""
    restored = make_engine(Settings(database_url=url), pool_size=1)
    try:
        with restored.connect() as conn:
            row = conn.execute(
                text(
                    f"SELECT e.body, e.key_id, e.headers_sealed, {sealing.live('e')} AS live"
                    " FROM events e WHERE e.public_id = :p"
                ),
                {"p": public_id},
            ).one()
            assert row.live is True  # the registry as dumped: the key was live then
            keys = sealing.PayloadKeys(restored, size=10, ttl_s=60, enabled=True)
            return keys.open(conn, row.key_id, row.body, None, row.headers_sealed, row.live)
    finally:
        restored.dispose()


def test_a_dump_taken_before_the_erasure_does_not_open_after_it(
    client, make_source, engine, keys, database_url, scratch_url
):
    """The threat: a copy of the inbox's database made before an erasure, restored after it.
    It holds the sealed payload and the key's id, never the key: the key store (a database
    of its own) held the key, and the erasure deleted it there. With the KEK in force,
    decrypting finds no key. No KEK retirement needed."""
    src = subject_source(make_source)
    jane = person("Jane Roe", "acct-1")
    gone = post(client, src, jane, "k1")
    kept = post(client, src, person("Rob Poe", "acct-2"), "k2")
    _finish(engine)
    row = stored(engine, gone)
    dump = subprocess.run(
        ["pg_dump", "--no-owner", "--no-privileges", _psql(database_url)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # No key material in the inbox's database: its data_keys has ids, no wrapped keys.
    copy = next(line for line in dump.splitlines() if line.startswith("COPY public.data_keys"))
    assert "wrapped" not in copy and "Jane Roe" not in dump
    subprocess.run(
        ["psql", "-q", "-v", "ON_ERROR_STOP=1", _psql(scratch_url)],
        input=dump,
        check=True,
        capture_output=True,
        text=True,
    )
    # Restored before the erasure, the copy opens as the live database does.
    assert json.loads(_restored_payload(scratch_url, gone).body or b"") == jane

    cli("erase", "--tenant", src.tenant, "--subject", "acct-1", "--reason", "GDPR")

    # The same copy, after it: nothing opens, though the KEK is the one that wrapped the key.
    opened = _restored_payload(scratch_url, gone)
    assert opened.erased and opened.body is None and opened.headers == {}
    assert in_keystore([row.key_id]) == {}  # decrypting with the KEK finds no key
    with pytest.raises(envelope.SealBroken):  # and no other live key opens it
        other = stored(engine, kept).key_id
        key = envelope.DataKey(
            row.key_id, envelope.unwrap(kr.keyring(), in_keystore([other])[other])
        )
        key.open(bytes(row.body), sealing.BODY)
    # The other subject's payload in the same copy still opens.
    assert json.loads(_restored_payload(scratch_url, kept).body or b"")["name"] == "Rob Poe"


def test_an_erasure_cut_short_between_the_two_databases_resumes(
    client, make_source, engine, keys, settings, monkeypatch
):
    """Step 1 (the registry marked, the erasure 'destroying') commits, then the key store's
    delete fails (a crash, an outage): every reader already finds the payload erased, the
    key is still in the key store, and the next erasure (or the beat's upkeep) finishes it:
    the key deleted, the erasure done, its audit row and report written once."""
    src = subject_source(make_source)
    gone = post(client, src, person("Jane Roe", "acct-1"), "k1")
    _finish(engine)
    key_id = stored(engine, gone).key_id

    live_store = os.environ["INBOX_KEYSTORE_URL"]
    with socket.socket() as s:  # a port nothing listens on: the key store is down
        s.bind(("127.0.0.1", 0))
        dead = f"postgresql://postgres@127.0.0.1:{s.getsockname()[1]}/inbox_keys"
    monkeypatch.setenv("INBOX_KEYSTORE_URL", dead)
    said = cli("erase", "--tenant", src.tenant, "--subject", "acct-1", "--reason", "GDPR", ok=False)
    assert "key store (INBOX_KEYSTORE_URL) does not answer" in said, said
    with engine.connect() as conn:
        status = conn.execute(text("SELECT status FROM erasures")).scalar_one()
    assert status == "destroying"
    assert detail(client, engine, gone)["body"] is None  # erased for every reader already

    monkeypatch.setenv("INBOX_KEYSTORE_URL", live_store)  # the key store is back
    assert len(in_keystore([key_id])) == 1  # the key itself not yet deleted
    assert erasure.resume(Runtime(settings, engine)) == 1
    assert erasure.resume(Runtime(settings, engine)) == 0  # once
    assert in_keystore([key_id]) == {}
    with engine.connect() as conn:
        done = conn.execute(text("SELECT status, keys_destroyed, events FROM erasures")).one()
        erased = conn.execute(
            text("SELECT count(*) FROM audit_log WHERE action = 'erased'")
        ).scalar_one()
        reports = conn.execute(
            text("SELECT count(*) FROM retention_reports WHERE kind = 'erasure'")
        ).scalar_one()
    assert tuple(done) == ("done", 1, 1) and erased == 1 and reports == 1


def test_kek_rotation_rewraps_the_key_store_and_rewrites_no_payload(
    client, make_source, engine, keys, monkeypatch
):
    src = subject_source(make_source)
    ids = [post(client, src, person("Jane Roe", f"acct-{n}"), f"k{n}") for n in range(2)]
    before = {i: bytes(stored(engine, i).body) for i in ids}
    key_ids = {stored(engine, i).key_id for i in ids}
    wrapped = in_keystore(key_ids)
    assert wrapped.keys() == key_ids
    old_kek = os.environ["INBOX_KEK"]
    new_kek = kr.new_key()
    monkeypatch.setenv("INBOX_KEK", f"{new_kek},{old_kek}")
    assert "data_keys (key store): 2 of 2 re-encrypted" in cli("secrets", "reencrypt")
    monkeypatch.setenv("INBOX_KEK", new_kek)  # the old KEK dropped
    keys.clear()
    rewrapped = in_keystore(key_ids)
    assert rewrapped.keys() == wrapped.keys()
    assert all(rewrapped[k] != wrapped[k] for k in wrapped)
    assert {i: bytes(stored(engine, i).body) for i in ids} == before  # not rewritten
    for i in ids:
        assert json.loads(detail(client, engine, i)["body"])["name"] == "Jane Roe"
    # The old KEK opens none of the rewrapped keys any more.
    monkeypatch.setenv("INBOX_KEK", old_kek)
    with pytest.raises(kr.KeyInvalid):
        envelope.unwrap(kr.keyring(), next(iter(rewrapped.values())))


def test_the_sealing_job_resumes_after_a_crash(client, make_source, engine, database_url):
    src = subject_source(make_source)
    ids = [post(client, src, person(f"P{n}", f"acct-{n % 3}"), f"k{n}") for n in range(30)]
    assert all(stored(engine, i).key_id is None for i in ids)  # stored in clear
    blocker = stored(engine, ids[17]).id
    with engine.connect() as lock:
        lock.execute(text("SELECT 1 FROM events WHERE id = :i FOR UPDATE"), {"i": blocker})
        job = subprocess.Popen(
            [sys.executable, "-m", "inbox.cli", "payloads", "seal", "--batch", "5"],
            env={**os.environ, "DATABASE_URL": database_url},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_for(lambda: _sealed(engine) >= 15, 120, "three batches committed")
            os.killpg(job.pid, signal.SIGKILL)  # mid-batch: waiting on the locked row
            job.wait(30)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
        lock.rollback()
    assert _sealed(engine) == 15
    shown = [detail(client, engine, i) for i in ids]  # both forms read, mid-migration
    assert [json.loads(s["body"])["name"] for s in shown] == [f"P{n}" for n in range(30)]
    assert [s["sealed"] for s in shown] == [n < 15 for n in range(30)]

    said = cli("payloads", "seal", "--batch", "5")
    assert said.splitlines()[-1].endswith("30 in all; 0 left")
    assert all(stored(engine, i).key_id is not None for i in ids)
    status = json.loads(cli("payloads", "status", "--json"))
    assert status["sealed"] == 30 and status["remaining"] == 0
    shown = [detail(client, engine, i) for i in ids]
    assert [json.loads(s["body"])["name"] for s in shown] == [f"P{n}" for n in range(30)]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM data_keys")).scalar_one() == 3


def _sealed(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(text("SELECT count(*) FROM events WHERE key_id IS NOT NULL")).scalar_one()
        )


def test_the_console_erases_a_subject_and_shows_it_on_the_event(
    client, app, make_source, engine, keys
):
    src = subject_source(make_source)
    gone = post(client, src, person("Jane Roe", "acct-1"), "k1")
    kept = post(client, src, person("Rob Poe", "acct-2"), "k2")
    _finish(engine)
    sign_in(client, new_token(engine, "carol", "operator"))
    page = client.get("/ui/erasures").get_data(as_text=True)
    assert 'id="no-erasures"' in page and 'id="erase"' in page
    form = {"csrf": grab(CSRF, page), "tenant": src.tenant, "subject": "acct-1", "reason": "r"}
    assert client.post("/ui/erasures", data=form).status_code == 302
    page = client.get("/ui/erasures").get_data(as_text=True)
    [era] = re.findall(r'data-erasure="(era_[0-9a-f]+)"', page)
    event = client.get(f"/ui/events/{gone}").get_data(as_text=True)
    assert 'id="erased"' in event and "by carol" in event and era in event
    assert "Jane Roe" not in event
    assert "Rob Poe" in client.get(f"/ui/events/{kept}").get_data(as_text=True)


def test_a_payload_sealed_under_a_key_destroyed_since_is_quarantined_as_erased(
    client, make_source, engine, keys
):
    """A process that had an erased key cached may seal a payload under it for a while
    (INBOX_DATA_KEY_TTL_S): the worker finds nothing to run and quarantines it, never runs
    the playbook on an empty body. A payload without the subject is under the tenant's key."""
    src = subject_source(make_source)
    late = post(client, src, person("Jane Roe", "acct-1"), "k1")
    anonymous = post(client, src, {"type": "person.changed", "name": "nobody"}, "k2")
    with engine.begin() as conn:
        subjects = dict(
            conn.execute(
                text("SELECT id, subject_digest = ''::bytea FROM data_keys ORDER BY id")
            ).all()
        )
        assert subjects[stored(engine, anonymous).key_id] is True  # the tenant's key
        assert subjects[stored(engine, late).key_id] is False
        conn.execute(
            text("UPDATE data_keys SET destroyed_at = now(), destroyed_by = 'x' WHERE id = :k"),
            {"k": stored(engine, late).key_id},
        )
    _finish(engine)
    with engine.connect() as conn:
        ev = conn.execute(
            text("SELECT state, last_error_class FROM events WHERE public_id = :p"), {"p": late}
        ).one()
        ran = conn.execute(
            text(
                "SELECT count(*) FROM steps s JOIN events e ON e.id = s.event_id"
                " WHERE e.public_id = :p"
            ),
            {"p": late},
        ).scalar_one()
    assert (ev.state, ev.last_error_class, ran) == ("quarantined", "PayloadErased", 0)
    assert stored(engine, anonymous).state == "completed"

    # A replay of it is refused up front (409 naming why), not run and quarantined again.
    resp = client.post(f"/api/v1/events/{late}/replay", headers=token(engine, "ops"))
    assert resp.status_code == 409 and resp.json["error"]["code"] == "payload_erased"
    assert "erased" in resp.json["error"]["message"] and late in resp.json["error"]["message"]
    said = cli("replay", late, "--actor", "ops", ok=False)
    assert "cannot be replayed: its payload was erased" in said
    with engine.connect() as conn:
        replays = conn.execute(
            text("SELECT count(*) FROM audit_log WHERE action = 'replay'")
        ).scalar_one()
    assert stored(engine, late).state == "quarantined" and replays == 0


def test_the_key_cache_is_bounded_and_expires(make_source, engine):
    """At most INBOX_DATA_KEY_CACHE keys per process; an entry past INBOX_DATA_KEY_TTL_S is
    read again (the unwrapped key does not outlive its time in memory)."""
    src = subject_source(make_source)
    bounded = sealing.PayloadKeys(engine, size=2, ttl_s=3600, enabled=True)
    for n in range(5):
        bounded.key_for(src.tenant_id, f"subject-{n}".encode())
    assert bounded.misses == 5 and bounded.cached() <= 4  # two live, two by id
    bounded.key_for(src.tenant_id, b"subject-4")  # the newest is still there
    assert bounded.misses == 5
    bounded.key_for(src.tenant_id, b"subject-0")  # the oldest was dropped
    assert bounded.misses == 6
    expiring = sealing.PayloadKeys(engine, size=100, ttl_s=0, enabled=True)
    expiring.key_for(src.tenant_id, None)
    expiring.key_for(src.tenant_id, None)
    assert expiring.misses == 2
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM data_keys")).scalar_one() == 6


def test_a_bad_erasure_body_names_each_field_and_erases_nothing(client, make_source, engine, keys):
    src = subject_source(make_source)
    kept = post(client, src, person("Jane Roe", "acct-1"), "k1")
    _finish(engine)
    resp = client.post(
        "/api/v1/erasures",
        json={"tenant": "", "subject": ["acct-1"], "when": "now"},
        headers=token(engine, "alice"),
    )
    assert resp.status_code == 400
    error = resp.json["error"]
    assert set(error["fields"]) == {"tenant", "reason", "subject", "when"}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM erasures")).scalar_one() == 0
        assert (
            conn.execute(
                text("SELECT count(*) FROM data_keys WHERE destroyed_at IS NULL")
            ).scalar_one()
            == 1
        )
    assert json.loads(detail(client, engine, kept)["body"])["name"] == "Jane Roe"
