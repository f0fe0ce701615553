"""The #16 variants through the real Flask app and PostgreSQL: stored once, read right."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from urllib.parse import quote_plus, urlencode

from sqlalchemy import Engine, text


def rows(engine: Engine) -> list:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT * FROM events ORDER BY id")))


def test_github_form_hook_is_verified_over_the_raw_form_and_read_from_payload(
    client, make_source, engine
):
    src = make_source(scheme="github", secrets_=("gh",), business_key_paths=["repository.id"])
    payload = json.dumps({"action": "opened", "repository": {"id": 42}})
    body = ("payload=" + quote_plus(payload)).encode()
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Hub-Signature-256": "sha256=" + hmac.new(b"gh", body, hashlib.sha256).hexdigest(),
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": "d-1",
    }
    first = client.post(src.path, data=body, headers=headers)
    assert first.status_code == 202, first.data
    again = client.post(src.path, data=body, headers=headers)
    assert again.headers["Idempotent-Replayed"] == "true"
    [row] = rows(engine)
    assert row.event_type == "pull_request" and row.business_key_digest is not None
    assert bytes(row.body) == body  # stored as received
    # The signature is over the raw form bytes: the decoded JSON does not verify.
    resp = client.post(src.path, data=payload, headers={**headers, "X-GitHub-Delivery": "d-2"})
    assert resp.status_code == 401
    bad = b"payload=%7B%7D"
    sig = "sha256=" + hmac.new(b"gh", bad + b"&x=1", hashlib.sha256).hexdigest()
    resp = client.post(
        src.path,
        data=bad + b"&x=1",
        headers={**headers, "X-Hub-Signature-256": sig, "X-GitHub-Delivery": "d-3"},
    )
    assert resp.status_code == 202  # extra fields are fine; payload is what is read
    no_payload = b"other=1"
    sig = "sha256=" + hmac.new(b"gh", no_payload, hashlib.sha256).hexdigest()
    resp = client.post(
        src.path,
        data=no_payload,
        headers={**headers, "X-Hub-Signature-256": sig, "X-GitHub-Delivery": "d-4"},
    )
    assert resp.status_code == 400 and "payload" in resp.json["error"]["message"]
    assert len(rows(engine)) == 2


def test_twilio_url_signed_with_the_default_port(client, make_source, engine):
    src = make_source(scheme="twilio", secrets_=("auth-token",))
    params = {"MessageSid": "SM9", "Body": "hi"}
    data = "http://localhost:80" + src.path + "".join(k + params[k] for k in sorted(params))
    sig = base64.b64encode(hmac.new(b"auth-token", data.encode(), hashlib.sha1).digest())
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Twilio-Signature": sig.decode(),
        "I-Twilio-Idempotency-Token": "tw-9",
    }
    assert client.post(src.path, data=urlencode(params), headers=headers).status_code == 204
    sha256 = hmac.new(b"auth-token", data.encode(), hashlib.sha256).digest()
    headers |= {
        "X-Twilio-Signature": base64.b64encode(sha256).decode(),
        "X-Twilio-Webhooks-Signature-Settings": "key=KS1,algorithm=HMAC_SHA256",
        "I-Twilio-Idempotency-Token": "tw-10",
    }
    assert client.post(src.path, data=urlencode(params), headers=headers).status_code == 204
    assert len(rows(engine)) == 2


def test_shopify_lowercase_headers_dedupe_on_their_webhook_id(client, make_source, engine):
    src = make_source(scheme="shopify", secrets_=("shh",))
    body = b'{"id":1}'
    sig = base64.b64encode(hmac.new(b"shh", body, hashlib.sha256).digest()).decode()
    headers = {
        "Content-Type": "application/json",
        "shopify-hmac-sha256": sig,
        "shopify-topic": "Product",
        "shopify-webhook-id": "wh-1",
    }
    assert client.post(src.path, data=body, headers=headers).status_code == 202
    assert client.post(src.path, data=body, headers=headers).headers["Idempotent-Replayed"]
    [row] = rows(engine)
    assert row.event_type == "Product"
