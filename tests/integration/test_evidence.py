"""Evidence bundles end to end: a delivery signed as the provider signs it is received,
processed by hand (a step, a failed callback attempt, an operator's replay), exported with
``inbox events export`` and checked offline with ``inbox evidence verify``; tampering with
any part, the manifest or its signature makes the check fail."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text

from inbox.cli import main
from inbox.domain import callbacks
from inbox.store.write import endpoints as estore
from tests.signers import SIGNERS, Signer

# Schemes whose signature covers the body and headers the bundle keeps.
REVERIFIABLE = ("stripe", "github", "slack", "shopify", "hmac")


@pytest.fixture
def cli():
    runner = CliRunner()

    def run(*args: str, ok: bool = True) -> str:
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert (result.exit_code == 0) == ok, result.output
        return result.output

    return run


@pytest.fixture
def export_key(tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch) -> Path:
    key = tmp_path / "export.pem"
    cli("evidence", "keygen", str(key))
    assert key.stat().st_mode & 0o777 == 0o600
    monkeypatch.setenv("INBOX_EVIDENCE_KEY_FILE", str(key))
    return key


def receive(client, make_source, s: Signer, event_id: str = "evt-1"):
    src = make_source(scheme=s.name, secrets_=("an-older-secret", s.secret), **s.options)
    headers, body = s.request(event_id, int(time.time()), "http://localhost" + src.path)
    resp = client.post(src.path, data=body, headers=headers)
    assert resp.status_code in (200, 202, 204), resp.data
    with client.application.extensions["inbox"].engine.connect() as conn:
        public_id = conn.execute(
            text("SELECT public_id FROM events ORDER BY id DESC LIMIT 1")
        ).scalar_one()
    return src, public_id, body, headers


def history(engine: Engine, src, public_id: str) -> None:
    """A step result, a callback with one failed attempt, and an operator's replay."""
    with engine.begin() as conn:
        ev = conn.execute(
            text("SELECT id FROM events WHERE public_id = :p"), {"p": public_id}
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO steps (event_id, name, result, attempt)"
                " VALUES (:e, 'lookup', '{\"account\": \"acct-42\"}', 1)"
            ),
            {"e": ev},
        )
        conn.execute(
            text("UPDATE events SET state = 'quarantined', attempts = 5 WHERE id = :e"), {"e": ev}
        )
        ep = estore.create_endpoint(
            conn, src.tenant, "https://example.test/cb", callbacks.new_secret()
        )
        d = conn.execute(
            text(
                "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type,"
                " body, state, attempts, last_status) VALUES ('msg_ev1', :t, :ep, :e, 'x',"
                " '{}', 'failed', 1, 500) RETURNING id"
            ),
            {"t": src.tenant_id, "ep": ep.id, "e": ev},
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO delivery_attempts (delivery_id, status, latency_ms, excerpt)"
                " VALUES (:d, 500, 12, 'oops')"
            ),
            {"d": d},
        )


@pytest.mark.parametrize("name", REVERIFIABLE)
def test_a_genuine_bundle_verifies_and_re_verifies_the_providers_signature(
    client, make_source, engine, cli, export_key, tmp_path, name
):
    s = SIGNERS[name]
    src, public_id, body, _ = receive(client, make_source, s)
    history(engine, src, public_id)
    cli("replay", public_id, "--actor", "auditor-test")
    out = tmp_path / "bundles"
    said = cli("events", "export", public_id, "--out", str(out)).splitlines()
    assert said[0] == str(out / public_id) and said[1].startswith("1 bundle(s), signed by key")
    bundle = out / public_id

    assert (bundle / "body.bin").read_bytes() == body  # the bytes as received
    headers = json.loads((bundle / "headers.json").read_text())
    assert headers["content-type"] == "application/json"
    assert not any(k in h for h in headers for k in ("signature", "hmac", "auth", "cookie"))
    v = json.loads((bundle / "verification.json").read_text())
    with engine.connect() as conn:
        ids = (
            conn.execute(
                text("SELECT id FROM source_secrets WHERE source_id = :s ORDER BY id"),
                {"s": src.id},
            )
            .scalars()
            .all()
        )
    assert v["scheme"] == name and v["verified"] is True
    assert v["secret_id"] == ids[1]  # the second secret matched, named by its row id
    assert v["tolerance"] == (300 if s.timestamped else None)
    assert v["key_digest"] and len(v["key_digest"]) == 64
    assert s.secret not in json.dumps(v) and "an-older-secret" not in json.dumps(v)
    steps = json.loads((bundle / "steps.json").read_text())
    assert [(x["name"], x["result"]) for x in steps] == [("lookup", {"account": "acct-42"})]
    (delivery,) = json.loads((bundle / "attempts.json").read_text())
    assert [a["status"] for a in delivery["attempts_log"]] == [500]
    audit = json.loads((bundle / "audit.json").read_text())
    assert [(a["actor"], a["action"]) for a in audit] == [("auditor-test", "replay")]
    event = json.loads((bundle / "event.json").read_text())
    assert event["public_id"] == public_id and event["body_stored"] == "raw"

    said = cli(
        "evidence", "verify", str(bundle), "--public-key", f"{export_key}.pub", "--secret", s.secret
    )
    assert "verified" in said and f"signature verifies ({name})" in said
    secret_file = tmp_path / "secret"
    secret_file.write_text(s.secret + "\n")
    cli("evidence", "verify", str(bundle), "--secret-file", str(secret_file))
    # the wrong secret: the provider's signature does not verify
    said = cli("evidence", "verify", str(bundle), "--secret", "not-the-secret", ok=False)
    assert "NOT VERIFIED" in said and "provider's signature" in said


PARTS = {
    "body": ("body.bin", lambda b: b.replace(b"{", b"{ ", 1)),
    "headers": ("headers.json", lambda b: b.replace(b"application/json", b"text/plain")),
    "verification": ("verification.json", lambda b: b.replace(b'"secret_id": ', b'"secret_id": 9')),
    "event": ("event.json", lambda b: b.replace(b'"state": ', b'"state": "x')),
    "steps": ("steps.json", lambda b: b.replace(b"acct-42", b"acct-43")),
    "attempts": ("attempts.json", lambda b: b.replace(b"500", b"200")),
    "audit": ("audit.json", lambda b: b.replace(b"auditor-test", b"someone-else")),
    "manifest": ("manifest.json", lambda b: b.replace(b'"sha256": {', b'"sha256": {"x": "y", ', 1)),
    "signature": ("manifest.sig", lambda b: (b"A" + b[1:]) if b[:1] != b"A" else (b"B" + b[1:])),
}


@pytest.fixture
def bundle(client, make_source, engine, cli, export_key, tmp_path) -> Path:
    src, public_id, _, _ = receive(client, make_source, SIGNERS["stripe"])
    history(engine, src, public_id)
    cli("replay", public_id, "--actor", "auditor-test")
    cli("events", "export", public_id, "--out", str(tmp_path / "b"))
    return tmp_path / "b" / public_id


@pytest.mark.parametrize("part", PARTS)
def test_tampering_with_any_part_fails_verification(bundle, cli, export_key, part):
    cli("evidence", "verify", str(bundle), "--public-key", f"{export_key}.pub")
    name, change = PARTS[part]
    before = (bundle / name).read_bytes()
    after = change(before)
    assert after != before
    (bundle / name).write_bytes(after)
    said = cli("evidence", "verify", str(bundle), "--public-key", f"{export_key}.pub", ok=False)
    assert "NOT VERIFIED" in said
    assert (name if part not in ("manifest", "signature") else "signature") in said


def test_a_bundle_resigned_by_another_key_fails_against_the_pinned_key(
    bundle, cli, export_key, tmp_path, monkeypatch
):
    other = tmp_path / "other.pem"
    cli("evidence", "keygen", str(other))
    said = cli("evidence", "verify", str(bundle), "--public-key", f"{other}.pub", ok=False)
    assert "NOT VERIFIED" in said and "not the given key" in said
    (bundle / "extra.txt").write_text("note")
    said = cli("evidence", "verify", str(bundle), ok=False)
    assert "extra.txt" in said


def test_export_by_filter_and_its_refusals(
    client, make_source, cli, export_key, tmp_path, monkeypatch
):
    s = SIGNERS["github"]
    src, first, _, _ = receive(client, make_source, s, "d-1")
    headers, body = s.request("d-2", int(time.time()), "http://localhost" + src.path)
    assert client.post(src.path, data=body, headers=headers).status_code in (200, 202, 204)
    out = tmp_path / "f"
    listed = cli("events", "export", "--filter", f"tenant={src.tenant}", "--out", str(out))
    assert len(list(out.iterdir())) == 2 and str(out / first) in listed.splitlines()
    for made in out.iterdir():
        cli("evidence", "verify", str(made), "--secret", s.secret)
    # a bundle is never overwritten; an unknown id and a bad filter are one-line errors
    said = cli("events", "export", first, "--out", str(out), ok=False)
    assert "never overwritten" in said
    assert "no event" in cli("events", "export", "evt_nope", "--out", str(out), ok=False)
    assert "NAME=VALUE" in cli("events", "export", "--filter", "colour=red", ok=False)
    monkeypatch.setenv("INBOX_EVIDENCE_KEY_FILE", "")
    assert "keygen" in cli("events", "export", first, "--out", str(tmp_path / "g"), ok=False)
    assert "never replaced" in cli("evidence", "keygen", str(export_key), ok=False)


def test_an_event_without_a_verdict_exports_and_says_it_cannot_be_re_verified(
    client, make_source, engine, cli, export_key, tmp_path
):
    s = SIGNERS["stripe"]
    _, public_id, _, _ = receive(client, make_source, s)
    with engine.begin() as conn:  # as an event received before verdicts were kept
        conn.execute(
            text("UPDATE events SET verification = NULL WHERE public_id = :p"), {"p": public_id}
        )
    cli("events", "export", public_id, "--out", str(tmp_path))
    v = json.loads((tmp_path / public_id / "verification.json").read_text())
    assert v["verified"] is None
    cli("evidence", "verify", str(tmp_path / public_id))
    said = cli("evidence", "verify", str(tmp_path / public_id), "--secret", s.secret, ok=False)
    assert "holds no verdict" in said


@pytest.mark.parametrize("name", ["stripe", "github", "token"])
def test_the_event_page_says_exactly_which_signature_headers_are_kept_and_where(
    client, make_source, engine, name
):
    """The console's promise about headers is what the database holds: the headers table
    is ``events.headers`` (no credential or signature among them), and the signature
    headers it names as kept apart are exactly those in ``events.verification``."""
    from tests.integration.ui_support import new_token, sign_in

    s = SIGNERS[name]
    _, public_id, _, sent = receive(client, make_source, s)
    with engine.connect() as conn:
        headers, verification = conn.execute(
            text("SELECT headers, verification FROM events WHERE public_id = :p"),
            {"p": public_id},
        ).one()
    kept = sorted((verification or {}).get("signature_headers") or {})
    bearer = new_token(engine, "api-reader", "viewer")
    shown = client.get(f"/api/v1/events/{public_id}", headers={"Authorization": f"Bearer {bearer}"})
    assert shown.status_code == 200 and shown.json["verification"] == verification  # as docs say
    sign_in(client, new_token(engine, "reader", "viewer"))
    page = client.get(f"/ui/events/{public_id}").get_data(as_text=True)
    said = page[page.index('id="signatures-kept"') :].split("</p>")[0]
    shown = re.findall(r'<span class="mono">([^<]+)</span>', said)
    assert shown == kept
    if name == "token":  # a shared token is never kept, anywhere
        assert kept == [] and "No signature header is kept" in said
    else:
        assert kept and "in the event's verification record" in said
        for header in kept:  # kept: the provider's signature, as it was sent
            assert verification["signature_headers"][header] == sent_value(sent, header)
    secret_names = re.compile(r"signature|hmac|token|secret|auth|cookie|key|challenge", re.I)
    assert not [h for h in headers if secret_names.search(h)]
    for value in (v for k, v in sent.items() if secret_names.search(k)):
        assert value not in page  # no credential or signature value is shown


def sent_value(sent: dict[str, str], header: str) -> str:
    return next(v for k, v in sent.items() if k.lower() == header)
