"""Every scheme through the real Flask app and PostgreSQL, with a sender written from its
provider's docs (tests/signers.py): accepted and stored once; a redelivery deduplicated on
the provider's own event id; one changed byte and a stale timestamp 401 with nothing
stored; each handshake answered with nothing stored."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest
from sqlalchemy import Engine, text

from inbox.domain.signatures import SCHEMES
from tests.signers import ED_KEY, SIGNERS, Signer, dumps, hx

SIGNED = sorted(set(SCHEMES) - {"none", "recipe"})


def count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM events")).scalar_one())


def source_for(make_source, s: Signer):
    return make_source(scheme=s.name, secrets_=(s.secret,), **s.options)


def send(client, src, s: Signer, event_id: str, ts: int | None = None, tamper: bool = False):
    ts = int(time.time()) if ts is None else ts
    url = "http://localhost" + src.path
    build = s.tampered if tamper else s.request
    headers, body = build(event_id, ts, url)
    return client.post(src.path, data=body, headers=headers)


# How each provider counts success, from its own documentation (docs/providers.md cites
# each): the answer to an accepted delivery and to every copy of it.
ANSWER = {
    "bitbucket": 200, "calendly": 202, "clerk": 202, "coinbase-commerce": 200,
    "discord": 204, "discord-interactions": 202, "dropbox": 200, "github": 202,
    "gitlab": 200, "hmac": 202, "hubspot": 202, "intercom": 200, "jira": 200,
    "lemonsqueezy": 200, "linear": 200, "mailgun": 200, "meta": 200, "mux": 202,
    "paddle": 200, "pagerduty": 202, "postmark": 200, "resend": 202, "sendgrid": 202,
    "sentry": 200, "shopify": 202, "slack": 200, "square": 202, "standard": 202,
    "stripe": 202, "token": 202, "twilio": 204, "twitch": 202, "typeform": 200,
    "vercel": 200, "zoom": 200,
}  # fmt: skip


# Dropbox notifications carry no id and no data: every change of one account sends the same
# bytes, so they are not keyed by their body (docs/providers.md).
NOT_KEYED = {"dropbox"}


def test_every_signed_scheme_has_its_answer_pinned():
    assert set(ANSWER) == set(SIGNED)
    assert {SCHEMES[n].accept_status for n in ("hmac", "token", "none", "recipe")} == {202}


@pytest.mark.parametrize("name", SIGNED)
def test_answered_as_the_provider_counts_success_and_a_retry_replays_it(
    client, make_source, engine, name
):
    s = SIGNERS[name]
    src = source_for(make_source, s)
    first = send(client, src, s, "evt-1")
    assert first.status_code == ANSWER[name], first.data
    if first.status_code == 204:  # no body at all, as the provider asks
        assert first.data == b"" and "Idempotent-Replayed" not in first.headers
        assert "Content-Type" not in first.headers
    else:
        assert first.json["status"] == "accepted"
    # A retry, signed anew a second later: the provider's id, or (no id) the same body.
    again = send(client, src, s, "evt-1", ts=int(time.time()) + 1)
    assert again.status_code == first.status_code, again.data
    if name in NOT_KEYED:
        assert "Idempotent-Replayed" not in again.headers and count(engine) == 2
    else:
        assert again.headers.get("Idempotent-Replayed") == "true", again.data
        assert again.data == first.data
        assert count(engine) == 1
    other = send(client, src, s, "evt-2")
    assert other.status_code == ANSWER[name] and "Idempotent-Replayed" not in other.headers
    assert count(engine) == (3 if name in NOT_KEYED else 2)
    # Signatures, tokens and credentials are never stored with the headers.
    headers, _ = s.request("evt-1", int(time.time()), "http://localhost" + src.path)
    secret_like = ("signature", "token", "authorization", "hmac")
    creds = {v for k, v in headers.items() if any(w in k for w in secret_like)}
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT headers::text FROM events")).scalars().all()
    assert creds or name == "mailgun"  # Mailgun signs inside the body
    assert not any(c in h for c in creds for h in stored)


def test_the_none_scheme_keeps_the_generic_202(client, make_source, engine):
    src = make_source(scheme="none", secrets_=())
    headers = {"Content-Type": "application/json", "Idempotency-Key": "k-1"}
    first = client.post(src.path, data=b"{}", headers=headers)
    again = client.post(src.path, data=b"{}", headers=headers)
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.headers["Idempotent-Replayed"] == "true" and again.data == first.data


@pytest.mark.parametrize("name", SIGNED)
def test_one_changed_byte_is_401_and_stores_nothing(client, make_source, engine, name):
    s = SIGNERS[name]
    src = source_for(make_source, s)
    resp = send(client, src, s, "evt-1", tamper=True)
    assert resp.status_code == 401, resp.data
    assert resp.json["error"]["code"] == "unauthorized"
    assert count(engine) == 0


@pytest.mark.parametrize("name", [n for n in SIGNED if SIGNERS[n].timestamped])
def test_stale_timestamp_is_401_and_stores_nothing(client, make_source, engine, name):
    s = SIGNERS[name]
    src = source_for(make_source, s)
    resp = send(client, src, s, "evt-1", ts=int(time.time()) - 3600)
    assert resp.status_code == 401, resp.data
    assert count(engine) == 0


def test_slack_url_verification(client, make_source, engine):
    src = make_source(scheme="slack", secrets_=("sl-secret",))
    body, ts = dumps({"type": "url_verification", "challenge": "c-42"}), int(time.time())
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": str(ts),
        "X-Slack-Signature": "v0=" + hx("sl-secret", f"v0:{ts}:".encode() + body),
    }
    resp = client.post(src.path, data=body, headers=headers)
    assert (resp.status_code, resp.json) == (200, {"challenge": "c-42"})
    assert count(engine) == 0


def test_zoom_url_validation(client, make_source, engine):
    src = make_source(scheme="zoom", secrets_=("zoom-secret-token",))
    body = dumps({"event": "endpoint.url_validation", "payload": {"plainToken": "pt-1"}})
    ts = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "x-zm-request-timestamp": str(ts),
        "x-zm-signature": "v0=" + hx("zoom-secret-token", f"v0:{ts}:".encode() + body),
    }
    resp = client.post(src.path, data=body, headers=headers)
    expected = hmac.new(b"zoom-secret-token", b"pt-1", hashlib.sha256).hexdigest()
    assert resp.status_code == 200
    assert resp.json == {"plainToken": "pt-1", "encryptedToken": expected}
    unsigned = client.post(src.path, data=body, headers={"Content-Type": "application/json"})
    assert unsigned.status_code == 401  # a handshake is answered only once verified
    assert count(engine) == 0


def test_twitch_callback_verification_is_plain_text(client, make_source, engine):
    s = SIGNERS["twitch"]
    src = source_for(make_source, s)
    headers, _ = s.request("m-1", int(time.time()), "")
    body = dumps({"challenge": "pogchamp-kappa-360noscope", "subscription": {}})
    stamp = headers["twitch-eventsub-message-timestamp"]
    sig = "sha256=" + hx(s.secret, b"m-1" + stamp.encode() + body)
    headers |= {
        "twitch-eventsub-message-type": "webhook_callback_verification",
        "twitch-eventsub-message-signature": sig,
    }
    resp = client.post(src.path, data=body, headers=headers)
    assert resp.status_code == 200 and resp.data == b"pogchamp-kappa-360noscope"
    assert resp.mimetype == "text/plain" and resp.headers["X-Content-Type-Options"] == "nosniff"
    assert count(engine) == 0


@pytest.mark.parametrize(
    ("name", "doc", "status", "answer"),
    [("discord", {"version": 1, "type": 0}, 204, b""), ("discord-interactions", {"type": 1}, 200,
     b'{"type":1}')],
)  # fmt: skip
def test_discord_pings(client, make_source, engine, name, doc, status, answer):
    src = source_for(make_source, SIGNERS[name])
    body, ts = dumps(doc), str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "X-Signature-Timestamp": ts,
        "X-Signature-Ed25519": ED_KEY.sign(ts.encode() + body).hex(),
    }
    resp = client.post(src.path, data=body, headers=headers)
    assert resp.status_code == status and resp.data.strip() == answer
    bad = headers | {"X-Signature-Ed25519": "00" * 64}  # Discord's own probe: must be 401
    assert client.post(src.path, data=body, headers=bad).status_code == 401
    assert count(engine) == 0


def test_dropbox_and_meta_verification_gets(client, make_source, engine):
    dropbox = make_source(scheme="dropbox", secrets_=("db-secret",))
    resp = client.get(dropbox.path + "?challenge=abc123")
    assert (resp.status_code, resp.data, resp.mimetype) == (200, b"abc123", "text/plain")
    assert client.get(dropbox.path).status_code == 405
    meta = make_source(scheme="meta", secrets_=("meta-app-secret", "my-verify-token"))
    q = "?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token="
    assert client.get(meta.path + q + "my-verify-token").data == b"1158201444"
    assert client.get(meta.path + q + "guess").status_code == 401
    assert count(engine) == 0


def test_an_operators_recipe_source_end_to_end(client, make_source, engine):
    recipe = {
        "name": "acme",
        "signature": "header:acme-signature",
        "signature_format": {"keys": ["v1"], "timestamp_key": "t"},
        "signed": "{timestamp}.{body}",
        "timestamp": {"from": "signature:t", "tolerance": 120},
        "event_id": ["header:acme-delivery"],
        "event_type": ["json:type"],
    }
    src = make_source(scheme="recipe", secrets_=("acme-secret",), recipe=recipe)
    body, ts = json.dumps({"type": "payment.succeeded"}).encode(), int(time.time())
    headers = {
        "Content-Type": "application/json",
        "Acme-Signature": f"t={ts},v1={hx('acme-secret', f'{ts}.'.encode() + body)}",
        "Acme-Delivery": "d-1",
    }
    assert client.post(src.path, data=body, headers=headers).status_code == 202
    assert client.post(src.path, data=body, headers=headers).headers["Idempotent-Replayed"]
    stale = headers | {"Acme-Signature": f"t={ts - 200},v1=" + hx("acme-secret", body)}
    assert client.post(src.path, data=body, headers=stale).status_code == 401
    with engine.connect() as conn:
        assert conn.execute(text("SELECT event_type FROM events")).scalar_one() == (
            "payment.succeeded"
        )
