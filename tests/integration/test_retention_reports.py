"""Signed retention reports: each prune round (with its day drops) and each erasure writes
a report of what went, by which rule or request, and what legal holds kept, signed with the
evidence key and checked offline by ``inbox evidence verify``."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text

from inbox.cli import main
from inbox.infra.config import Settings
from inbox.services import upkeep
from inbox.services.runtime import Runtime
from tests.integration.test_holds import old_event
from tests.integration.test_partitions import today


def cli(*args: str, ok: bool = True) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert (result.exit_code == 0) == ok, result.output
    return result.output


@pytest.fixture
def export_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    key = tmp_path / "export.pem"
    cli("evidence", "keygen", str(key))
    monkeypatch.setenv("INBOX_EVIDENCE_KEY_FILE", str(key))
    return key


def reports(engine: Engine) -> list:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT public_id, kind, manifest IS NOT NULL AS signed FROM retention_reports")
        ).all()


def test_a_prune_round_reports_what_went_and_what_a_hold_kept(
    engine, make_source, made_days, export_key, tmp_path
):
    src = make_source(tenant="acme", name="hooks")
    held_day = today(engine) - dt.timedelta(days=400)
    free_day = held_day - dt.timedelta(days=1)
    held_evt = old_event(engine, made_days, held_day, src)
    old_event(engine, made_days, free_day, src)
    placed = cli("holds", "place", "--tenant", "acme", "--event", held_evt, "--reason", "m-17")
    [hold_id] = [line.split()[1] for line in placed.splitlines() if line.startswith("id ")]

    upkeep.prune(Runtime(Settings(), engine), dry_run=True)
    assert reports(engine) == []  # a dry run removes nothing and reports nothing
    result = upkeep.prune(Runtime(Settings(evidence_key_file=str(export_key)), engine))
    assert result.days_dropped == [str(free_day)]
    [(rpt, kind, signed)] = reports(engine)
    assert kind == "prune" and signed  # signed as it was written: the key was here

    out = tmp_path / "reports"
    said = cli("evidence", "reports", "--out", str(out))
    assert said.splitlines()[0] == str(out / rpt)
    bundle = out / rpt
    verified = cli("evidence", "verify", str(bundle), "--public-key", f"{export_key}.pub")
    assert f"verified: report {rpt}" in verified
    doc = json.loads((bundle / "report.json").read_text())
    assert doc["removed"]["days"] == [str(free_day)] and doc["removed"]["bodies"] == 1
    assert doc["kept"]["bodies_under_legal_hold"] == 1
    assert doc["kept"]["days"] == [f"{held_day}: legal hold {hold_id} (1 held event(s))"]
    assert doc["rules"]["sources"]["acme/hooks"]["retention_days"] == 30
    assert [h["id"] for h in doc["holds_in_force"]] == [hold_id]

    tampered = dict(doc, removed=dict(doc["removed"], days=[]))
    (bundle / "report.json").write_text(json.dumps(tampered))
    said = cli("evidence", "verify", str(bundle), ok=False)
    assert "NOT VERIFIED: report.json does not match its digest" in said


def test_an_erasure_reports_itself_signed_at_export_where_it_was_not_at_write(
    client, engine, make_source, tmp_path, monkeypatch
):
    make_source(tenant="acme", subject_path="account")
    monkeypatch.delenv("INBOX_EVIDENCE_KEY_FILE", raising=False)
    said = cli(
        "erase", "--tenant", "acme", "--subject", "acct-1", "--reason", "GDPR-17",
        "--actor", "dpo", "--json",
    )  # fmt: skip
    era = json.loads(said)["id"]
    [(rpt, kind, signed)] = reports(engine)
    assert kind == "erasure" and not signed  # no key in this process when it was written
    asked = cli("erase", "--tenant", "acme", "--reason", "offboard", "--actor", "a", "--json")
    assert len(reports(engine)) == 1  # asked, not done: nothing to report yet
    cli("erase", "--reject", json.loads(asked)["id"], "--actor", "b")
    assert len(reports(engine)) == 1  # rejected: nothing erased

    key = tmp_path / "export.pem"
    cli("evidence", "keygen", str(key))
    monkeypatch.setenv("INBOX_EVIDENCE_KEY_FILE", str(key))
    out = tmp_path / "reports"
    cli("evidence", "reports", "--out", str(out), "--kind", "erasure")
    verified = cli("evidence", "verify", str(out / rpt), "--public-key", f"{key}.pub")
    assert f"verified: report {rpt}" in verified
    doc = json.loads((out / rpt / "report.json").read_text())
    assert doc["kind"] == "erasure" and doc["erasure"]["id"] == era
    assert doc["erasure"]["requested_by"] == "dpo" and doc["erasure"]["reason"] == "GDPR-17"
