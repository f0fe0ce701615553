"""``inbox sources schemes``, and an operator adding a provider with a recipe file."""

from __future__ import annotations

import json

from click.testing import CliRunner

from inbox.cli import main
from inbox.domain.signatures import SCHEMES

ACME = {
    "name": "acme",
    "summary": "Acme Pay: HMAC-SHA256 hex of {t}.{body} in Acme-Signature",
    "signature": "header:acme-signature",
    "signature_format": {"keys": ["v1"], "timestamp_key": "t"},
    "signed": "{timestamp}.{body}",
    "timestamp": {"from": "signature:t"},
    "event_id": ["header:acme-delivery"],
    "event_type": ["json:type"],
}


def test_schemes_lists_every_scheme_one_per_line_with_answer_and_dedup_key() -> None:
    result = CliRunner().invoke(main, ["sources", "schemes"], catch_exceptions=False)
    assert result.exit_code == 0
    header, *lines = result.output.splitlines()
    assert header.split() == ["SCHEME", "ANSWER", "DEDUP", "KEY", "EVENT", "TYPE", "VERIFIES"]
    assert [line.split()[0] for line in lines] == sorted(SCHEMES)
    by_name = {line.split()[0]: line.split(None, 4) for line in lines}
    assert by_name["github"][1:4] == ["202", "header:x-github-delivery", "header:x-github-event"]
    assert by_name["stripe"][1:4] == ["202", "json:id", "json:type"]
    assert by_name["paddle"][1:3] == ["200", "json:event_id"]
    assert by_name["discord"][1:3] == ["204", "sha256(body)"]  # no id: its body is the key
    assert by_name["zoom"][1:3] == ["200", "sha256(body)"]
    assert by_name["twilio"][1] == "204"
    assert by_name["hmac"][1:3] == ["202", "Idempotency-Key"]  # generic: 202, keys only
    text = result.output
    assert "Ed25519" in text and "ECDSA P-256" in text
    out = CliRunner().invoke(main, ["sources", "schemes", "--json"], catch_exceptions=False)
    rows = {r["scheme"]: r for r in json.loads(out.output)}
    assert set(rows) == set(SCHEMES)
    assert rows["shopify"]["event_id"][:2] == [
        "header:x-shopify-webhook-id",
        "header:shopify-webhook-id",
    ]
    assert rows["linear"]["timestamped"] is True
    hubspot = rows["hubspot"]
    assert hubspot["answer"] == 202 and hubspot["restamped"] == ["*.attemptNumber"]
    assert hubspot["identity"] == {"kind": "event_id", "from": ["json:0.eventId"]}
    assert rows["zoom"]["identity"] == {"kind": "body", "from": ["sha256(body)"]}
    assert rows["dropbox"]["identity"]["kind"] == "idempotency_key"  # see docs/providers.md
    assert rows["token"]["identity"]["kind"] == "idempotency_key"
    # Every answer code says where the provider documents it.
    assert all(r["answer"] in (200, 202, 204) and r["answer_docs"] for r in rows.values())
    assert "developer.paddle.com" in rows["paddle"]["answer_docs"]


def test_a_recipe_file_adds_a_provider_and_a_bad_one_names_the_field(
    database_url, engine, tmp_path
) -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["tenants", "create", "shop"]).exit_code == 0
    good = tmp_path / "acme.json"
    good.write_text(json.dumps(ACME))
    base = ["sources", "create", "--tenant", "shop", "--scheme", "recipe", "--secret", "s"]
    result = runner.invoke(main, [*base, "--name", "acme", "--option", f"recipe=@{good}"])
    assert result.exit_code == 0, result.output
    assert "scheme   recipe (acme)" in result.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(ACME | {"encoding": "b32"}))
    result = runner.invoke(main, [*base, "--name", "bad", "--option", f"recipe=@{bad}"])
    assert result.exit_code != 0
    assert "Invalid recipe: encoding must be one of hex, base64, base64url" in result.output
    result = runner.invoke(main, [*base, "--name", "none"])
    assert result.exit_code != 0 and "--option recipe=@FILE" in result.output
    result = runner.invoke(main, [*base, "--name", "gone", "--option", "recipe=@/nope.json"])
    assert result.exit_code != 0 and "cannot read /nope.json" in result.output
