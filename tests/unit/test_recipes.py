"""The recipe engine: validation that names the bad field, templates, handshakes, and an
operator's own recipe as a source option."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from inbox.domain.errors import BadRequest
from inbox.domain.retention import min_key_window_hours
from inbox.domain.signatures import (
    SCHEMES,
    RecipeError,
    SchemeConfig,
    SignatureError,
    SignedRequest,
    parse_recipe,
    scheme_for,
)
from inbox.domain.signatures.recipe_scheme import RecipeScheme
from inbox.domain.sources import SourceOptions

NOW = 1_700_000_000
DOCS = Path(__file__).resolve().parents[2] / "docs" / "recipes.md"
ACME: dict[str, Any] = {
    "name": "acme",
    "summary": "Acme: HMAC-SHA256 hex of {t}.{body} in Acme-Signature t=...,v1=...",
    "signature": "header:acme-signature",
    "signature_format": {"separator": ",", "assign": "=", "keys": ["v1"], "timestamp_key": "t"},
    "signed": "{timestamp}.{body}",
    "timestamp": {"from": "signature:t", "tolerance": 120},
    "event_id": ["header:acme-delivery", "json:id"],
    "event_type": ["json:type"],
}


def acme_request(secret: str = "acme-secret", ts: int = NOW, body: bytes = b'{"id":"e1"}'):
    sig = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    headers = {"acme-signature": f"t={ts},v1={sig}", "content-type": "application/json"}
    return SignedRequest("POST", "", headers, body)


def test_an_operator_recipe_verifies_like_a_builtin() -> None:
    scheme = scheme_for("recipe", ACME)
    assert scheme.name == "acme" and scheme.timestamped
    assert (scheme.event_id_path, scheme.event_type_path) == ("id", "type")
    verified = scheme.verify(acme_request(), SchemeConfig(("acme-secret",)), NOW)
    assert verified.event_id is None  # no acme-delivery header: the JSON path is read later
    good = acme_request()
    tampered = SignedRequest("POST", "", good.headers, b'{"id":"e2"}')
    with pytest.raises(SignatureError):
        scheme.verify(tampered, SchemeConfig(("acme-secret",)), NOW)
    assert scheme_for("recipe", dict(ACME)) is scheme  # cached per recipe text


def test_the_recipe_tolerance_applies_unless_the_source_sets_its_own() -> None:
    scheme = scheme_for("recipe", ACME)
    old = acme_request(ts=NOW - 200)
    with pytest.raises(SignatureError):
        scheme.verify(old, SchemeConfig(("acme-secret",)), NOW)  # recipe: 120 s
    scheme.verify(old, SchemeConfig(("acme-secret",), tolerance=600), NOW)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"name": "Acme!"}, "name", "lower-case"),
        ({"algorithm": "md5"}, "algorithm", "sha1, sha256, sha512"),
        ({"encoding": "b32"}, "encoding", "hex, base64"),
        ({"signature": "body:x"}, "signature[0]", "not a location"),
        ({"signed": "{timestamp}.{bdy}"}, "signed", "{bdy} is not a known token"),
        ({"signed": "{body"}, "signed", "without a }"),
        ({"timestamp": {"from": "signature:ts"}}, "timestamp.from", "lacks"),
        ({"timestamp": {"from": "header:x", "unit": "min"}}, "unit", "s, ms, rfc3339"),
        ({"timestamp": {"from": "header:x", "tolerance": 0}}, "timestamp.tolerance", "positive"),
        ({"signature_format": {"keys": []}}, "signature_format.keys", "non-empty"),
        ({"signature_format": {"keys": ["v1"], "separator": ",,"}}, "separator", "one character"),
        ({"event_id": ["json:a", "header:b"]}, "event_id", "headers first"),
        ({"tolerance": 5}, "tolerance", "not a known recipe field"),
        ({"content_types": ["JSON"]}, "content_types", "media type"),
        ({"handshake": [{"when": {}}]}, "handshake[0].when", "map locations"),
        ({"handshake": [{"when": {"json:a": 1}, "method": "GET", "check": "x"}]}, "check", "loc"),
        ({"handshake": [{"when": {"json:a": 1}, "check": "none"}]}, "check", "by signature"),
        ({"handshake": [{"when": {"json:a": 1}, "text": "{nope}"}]}, "text", "not a known"),
    ],
)
def test_a_bad_recipe_names_the_field(change: dict[str, Any], field: str, words: str) -> None:
    bad = ACME | change
    with pytest.raises(RecipeError) as exc:
        parse_recipe(bad)
    assert field in exc.value.field and words in str(exc.value), str(exc.value)


def test_missing_and_unknown_fields() -> None:
    with pytest.raises(RecipeError, match="signature: is required"):
        parse_recipe({"name": "x"})
    with pytest.raises(RecipeError, match=r"uses \{timestamp\}"):
        parse_recipe({"name": "x", "signature": "header:s", "signed": "{timestamp}{body}"})
    with pytest.raises(RecipeError, match="recipe: must be a JSON object"):
        parse_recipe(["x"])
    assert parse_recipe({"name": "basic", "auth": "basic"}).auth == "basic"


def test_source_options_validate_the_recipe_with_the_field_named() -> None:
    opts = SourceOptions.from_dict({"recipe": ACME})
    assert opts.recipe == ACME and opts.to_dict() == {"recipe": ACME}
    with pytest.raises(BadRequest) as exc:
        SourceOptions.from_dict({"recipe": ACME | {"encoding": "b32"}})
    assert "encoding" in exc.value.message
    assert exc.value.extra["fields"] == {
        "recipe": {"encoding": ["must be one of hex, base64, base64url (got 'b32')"]}
    }


def test_every_builtin_recipe_round_trips() -> None:
    text = (
        Path(__file__).resolve().parents[2] / "inbox/domain/signatures/recipes.json"
    ).read_text()

    def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), keys
        return dict(pairs)

    raws = json.loads(text, object_pairs_hook=no_duplicate_keys)
    names = [r["name"] for r in raws]
    assert len(names) == len(set(names))
    for raw in raws:
        assert isinstance(SCHEMES[raw["name"]], RecipeScheme)
        assert parse_recipe(raw).name == raw["name"]


def test_zoom_url_validation_is_answered_with_the_hmac_of_the_plain_token() -> None:
    zoom, secret = SCHEMES["zoom"], "zoom-secret-token"
    body = json.dumps({"event": "endpoint.url_validation", "payload": {"plainToken": "qgg8"}})
    ts = str(NOW)
    sig = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    headers = {"x-zm-signature": "v0=" + sig, "x-zm-request-timestamp": ts}
    req = SignedRequest("POST", "", headers, body.encode())
    verified = zoom.verify(req, SchemeConfig(("old", secret)), NOW)
    answer = zoom.challenge(req, json.loads(body), verified)
    expected = hmac.new(secret.encode(), b"qgg8", hashlib.sha256).hexdigest()
    assert answer == (200, {"plainToken": "qgg8", "encryptedToken": expected})
    assert zoom.challenge(req, {"event": "meeting.started"}, verified) is None


def test_twitch_verification_is_answered_in_plain_text() -> None:
    twitch = SCHEMES["twitch"]
    req = SignedRequest(
        "POST", "", {"twitch-eventsub-message-type": "webhook_callback_verification"}, b""
    )
    assert twitch.challenge(req, {"challenge": "pogchamp-kappa"}) == (200, "pogchamp-kappa")
    other = SignedRequest("POST", "", {"twitch-eventsub-message-type": "notification"}, b"")
    assert twitch.challenge(other, {"challenge": "x"}) is None


def test_get_handshakes_dropbox_and_meta() -> None:
    get = SignedRequest("GET", "https://h/x?challenge=abc%20d", {}, b"")
    assert SCHEMES["dropbox"].get_challenge(get, SchemeConfig(("s",))) == (200, "abc d")
    assert (
        SCHEMES["dropbox"].get_challenge(
            SignedRequest("GET", "https://h/x", {}, b""), SchemeConfig(("s",))
        )
        is None
    )
    meta = SCHEMES["meta"]
    url = "https://h/x?hub.mode=subscribe&hub.verify_token=vt&hub.challenge=1158201444"
    assert meta.get_challenge(SignedRequest("GET", url, {}, b""), SchemeConfig(("app", "vt"))) == (
        200,
        "1158201444",
    )
    with pytest.raises(SignatureError):
        meta.get_challenge(SignedRequest("GET", url, {}, b""), SchemeConfig(("app",)))


def test_the_docs_worked_example_is_a_valid_recipe() -> None:
    text = DOCS.read_text()
    start = text.index("```json\n", text.index("## A worked example")) + len("```json\n")
    example = json.loads(text[start : text.index("```", start)])
    scheme = scheme_for("recipe", example)
    assert scheme.name == example["name"]


def test_restamped_fields_are_left_out_of_the_match_digest_and_nothing_else() -> None:
    linear, github = SCHEMES["linear"], SCHEMES["github"]
    first = b'{"type":"Issue","data":{"id":1},"webhookTimestamp":1700000000000}'
    retry = b'{"type":"Issue","data":{"id":1},"webhookTimestamp":1700000060000}'
    changed = b'{"type":"Issue","data":{"id":2},"webhookTimestamp":1700000000000}'
    reordered = b'{"data":{"id":1},"type":"Issue","webhookTimestamp":1700000000000}'
    assert linear.match_digest(first) == linear.match_digest(retry)
    assert linear.match_digest(first) != linear.match_digest(changed)
    assert linear.match_digest(first) != linear.match_digest(reordered)  # order is kept
    assert github.match_digest(first) == hashlib.sha256(first).digest()
    assert linear.match_digest(b"not json") == hashlib.sha256(b"not json").digest()
    with pytest.raises(RecipeError, match="restamped"):
        parse_recipe(ACME | {"restamped": "webhookTimestamp"})


def test_hubspot_restamps_attempt_number_in_every_event_of_a_batch() -> None:
    hubspot = SCHEMES["hubspot"]
    events = [
        {"eventId": 1, "subscriptionType": "contact.creation", "attemptNumber": 0},
        {"eventId": 2, "subscriptionType": "contact.creation", "attemptNumber": 0},
    ]
    first = json.dumps(events).encode()
    retry = json.dumps([e | {"attemptNumber": 1} for e in events]).encode()
    other = json.dumps([events[0], events[1] | {"eventId": 3}]).encode()
    assert hubspot.match_digest(first) == hubspot.match_digest(retry)
    assert hubspot.match_digest(first) != hubspot.match_digest(other)
    assert hubspot.match_digest(first) != hashlib.sha256(first).digest()


def test_accept_status_is_200_202_or_204() -> None:
    assert parse_recipe(ACME | {"accept_status": 204}).accept_status == 204
    assert parse_recipe(ACME).accept_status == 202
    for bad in (201, 299, "200", True):
        with pytest.raises(RecipeError, match="accept_status"):
            parse_recipe(ACME | {"accept_status": bad})
    with pytest.raises(RecipeError, match="body_identity"):
        parse_recipe(ACME | {"body_identity": "yes"})


def test_the_docs_table_lists_every_scheme() -> None:
    from dev.docs_hooks import schemes_table  # the table of docs/how-to/add-a-provider.md

    rows = {
        line.split("|")[1].strip().strip("`")
        for line in schemes_table().splitlines()
        if line.startswith("| `")
    }
    assert set(SCHEMES) <= rows


def test_a_get_handshake_checked_by_the_signature_okta_style() -> None:
    okta = {
        "name": "okta-hooks",
        "auth": "token",
        "signature": "header:authorization",
        "handshake": [
            {
                "method": "GET",
                "when": {"header:x-okta-verification-challenge": None},
                "json": {"verification": "{header:x-okta-verification-challenge}"},
            }
        ],
    }
    scheme = scheme_for("recipe", okta)
    h = {"authorization": "okta-secret", "x-okta-verification-challenge": "c-1"}
    get = SignedRequest("GET", "https://h/x", h, b"")
    assert scheme.get_challenge(get, SchemeConfig(("okta-secret",))) == (
        200,
        {"verification": "c-1"},
    )
    with pytest.raises(SignatureError):
        scheme.get_challenge(get, SchemeConfig(("other",)))


def test_docs_providers_table_states_every_schemes_answer_and_restamped_fields() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "providers.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    assert set(rows) == set(SCHEMES)
    for name, scheme in SCHEMES.items():
        answer, cited, _, window, restamped = rows[name][1:]
        assert int(answer) == scheme.accept_status, name
        assert window.startswith(f"{min_key_window_hours(name)} h"), name
        assert scheme.accept_docs.partition(": ")[2] in cited, name
        assert all(f"`{path}`" in restamped for path in scheme.restamped), name


def test_the_match_digest_of_a_parsed_body_is_the_same_and_leaves_it_unchanged() -> None:
    hubspot = SCHEMES["hubspot"]
    events = [{"eventId": i, "attemptNumber": 2, "v": {"a": [1, 2]}} for i in (1, 2)]
    body = json.dumps(events).encode()
    parsed = json.loads(body)
    assert hubspot.match_digest(body, parsed) == hubspot.match_digest(body)
    assert parsed == events  # copied along the path, never changed in place


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the page signs with openssl")
def test_the_docs_check_signs_as_the_worked_example_verifies() -> None:
    """The page's shell lines (``body=…``, ``sig=$(… openssl …)``) make a signature that its
    recipe accepts, and the header the page's ``curl`` sends carries it as the recipe reads."""
    text = DOCS.read_text()
    start = text.index("```json\n", text.index("## A worked example")) + len("```json\n")
    scheme = scheme_for("recipe", json.loads(text[start : text.index("```", start)]))
    check = text[text.index("```sh\n", text.index("Check it before")) + len("```sh\n") :]
    lines = check[: check.index("```")].splitlines()
    signing = "\n".join(line for line in lines if line.startswith(("body=", "sig=")))
    header = next(line for line in lines if "Acme-Signature:" in line)
    assert '"Acme-Signature: t=$t,v1=$sig"' in header and "'Acme-Delivery: d-1'" in header
    out = subprocess.run(
        ["bash", "-euc", f'{signing}\nprintf "%s\\n%s\\n%s" "$t" "$sig" "$body"'],
        env={"PATH": os.environ["PATH"], "ACME_SIGNING_SECRET": "whsec_acme"},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    t, sig, body = out.split("\n", 2)
    headers = {
        "acme-signature": f"t={t},v1={sig}",
        "acme-delivery": "d-1",
        "content-type": "application/json",
    }
    request = SignedRequest("POST", "", headers, body.encode())
    verified = scheme.verify(request, SchemeConfig(("whsec_acme",)), int(t))
    assert verified.event_id == "d-1"
    with pytest.raises(SignatureError):
        scheme.verify(request, SchemeConfig(("another",)), int(t))
