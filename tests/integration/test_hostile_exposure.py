"""What the inbox gives away: redacted form fields, /metrics behind a token and without
tenant names, API answers that are neither sniffed nor cached."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import replace
from urllib.parse import parse_qs, urlencode

import pytest
from sqlalchemy import text

from inbox.infra import metrics
from inbox.store.write import tokens as tstore
from web import create_app


def twilio_signature(token: str, url: str, params: dict[str, str]) -> str:
    data = url + "".join(k + params[k] for k in sorted(params))
    return base64.b64encode(hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()).decode()


def test_redact_paths_apply_to_form_bodies(client, make_source, engine):
    src = make_source(scheme="twilio", secrets_=("auth-token",), redact_paths=["Body", "Nope"])
    params = {"MessageSid": "SM1", "Body": "my PIN is 4321", "From": "+15550001111"}
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Twilio-Signature": twilio_signature("auth-token", "http://localhost" + src.path, params),
        "I-Twilio-Idempotency-Token": "tw-redact",
    }
    resp = client.post(src.path, data=urlencode(params), headers=headers)
    assert resp.status_code == 204, resp.data  # Twilio: 204, no body
    with engine.connect() as conn:
        body = bytes(conn.execute(text("SELECT body FROM events")).scalar_one())
    assert b"4321" not in body
    stored = parse_qs(body.decode())
    assert stored["Body"] == ["[redacted]"] and stored["MessageSid"] == ["SM1"]


def test_metrics_can_require_a_bearer_token(settings, engine, bell):
    app = create_app(replace(settings, metrics_token="scrape-me"), engine=engine, doorbell=bell)
    client = app.test_client()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic c2NyYXBlLW1l"}):
        resp = client.get("/metrics", headers=headers)
        assert resp.status_code == 401 and resp.is_json
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    resp = client.get("/metrics", headers={"Authorization": "Bearer scrape-me"})
    assert resp.status_code == 200 and b"inbox_stats_up 1.0" in resp.data


def test_metrics_without_a_token_configured_stay_open(client):
    assert client.get("/metrics").status_code == 200


@pytest.fixture
def no_tenant_labels():
    metrics.set_tenant_labels(False)
    yield
    metrics.set_tenant_labels(None)


def test_tenant_labels_can_be_turned_off(client, make_source, engine, no_tenant_labels):
    from tests.helpers import body_of, hmac_headers

    tenant = f"secretcorp{secrets.token_hex(3)}"
    a = make_source(tenant=tenant, name="own")
    b = make_source(name="own")  # the same source name in another tenant
    for src, key in ((a, "1"), (b, "2")):
        body = body_of({"k": key})
        assert (
            client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key)).status_code
            == 202
        )
    with engine.begin() as conn:  # one dead letter each, so both families have two rows
        conn.execute(text("UPDATE events SET state = 'quarantined'"))
    resp = client.get("/metrics")
    assert resp.status_code == 200
    page = resp.data.decode()
    assert tenant not in page and a.tenant not in page and b.tenant not in page
    assert 'inbox_dead_letters{source="own",tenant=""} 2.0' in page
    assert 'inbox_events_accepted_total{source="own",tenant=""}' in page


def test_api_answers_are_nosniff_and_no_store(client, engine):
    with engine.begin() as conn:
        _, secret = tstore.create_token(conn, "hdr", "viewer")
    for headers in ({"Authorization": f"Bearer {secret}"}, {}):
        for path in ("/api/v1/events", "/api/v1/events/evt_nope", "/api/v1/openapi.json"):
            resp = client.get(path, headers=headers)
            assert resp.headers["X-Content-Type-Options"] == "nosniff", path
            assert resp.headers["Cache-Control"] == "no-store", path
