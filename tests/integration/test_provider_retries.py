"""A provider's retry of one delivery is one event, and each source verifies with every
active secret: HubSpot's restamped batches, deliveries without any id keyed by their body
(the playbook runs once), and a secret rotation per signature family."""

from __future__ import annotations

import base64
import hashlib
import time

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from sqlalchemy import Engine, text

import tests.sink_playbooks  # noqa: F401  (registers the playbooks the runner resolves)
from inbox.infra.config import Settings
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.write import sources as store
from tests.helpers import body_of, hmac_headers, sink_rows
from tests.signers import SIGNERS, b64, dumps, hx, mac


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    return Settings(database_url=settings.database_url, retry_base_seconds=0.01)


def rows(engine: Engine, sql: str) -> list:
    with engine.connect() as conn:
        return list(conn.execute(text(sql)))


# --------------------------------------------------------------------------- HubSpot


def hubspot_post(client, src, events: list[dict]) -> object:
    """A batch as HubSpot sends it: a JSON array, signed v3 over method, URL, body, ms."""
    body, ms = dumps(events), str(int(time.time() * 1000))
    url = "http://localhost" + src.path
    sig = b64(mac("hs-client-secret", b"POST" + url.encode() + body + ms.encode()))
    headers = {
        "Content-Type": "application/json",
        "X-HubSpot-Signature-v3": sig,
        "X-HubSpot-Request-Timestamp": ms,
    }
    return client.post(src.path, data=body, headers=headers)


def hubspot_batch(attempt: int) -> list[dict]:
    base = {"portalId": 62515, "appId": 54321, "occurredAt": 1700000000000,
            "subscriptionType": "contact.propertyChange", "attemptNumber": attempt,
            "objectId": 123, "changeSource": "CRM", "propertyName": "email"}  # fmt: skip
    return [
        base | {"eventId": 1001, "subscriptionId": 7, "propertyValue": "a@example.com"},
        base | {"eventId": 1002, "subscriptionId": 8, "propertyValue": "b@example.com"},
    ]


def test_a_hubspot_retry_with_attempt_number_raised_replays_the_first_answer(
    client, make_source, engine
):
    src = make_source(scheme="hubspot", secrets_=("hs-client-secret",))
    first = hubspot_post(client, src, hubspot_batch(0))
    assert first.status_code == 202, first.data
    for attempt in (1, 2):
        retry = hubspot_post(client, src, hubspot_batch(attempt))
        assert retry.status_code == 202, retry.data  # not 422 idempotency_key_reused
        assert retry.headers["Idempotent-Replayed"] == "true" and retry.data == first.data
    [event] = rows(engine, "SELECT body_sha256, body FROM events")
    # The evidence is the hash of the bytes received first, not the comparison digest.
    assert bytes(event.body_sha256) == hashlib.sha256(dumps(hubspot_batch(0))).digest()
    assert rows(engine, "SELECT count(*) FROM idempotency_conflicts")[0][0] == 0
    assert rows(engine, "SELECT duplicate_count FROM event_keys")[0][0] == 2
    # Anything else changed under the same eventId is still a conflict, kept apart.
    changed = hubspot_batch(3)
    changed[1]["propertyValue"] = "c@example.com"
    conflict = hubspot_post(client, src, changed)
    assert conflict.status_code == 422
    assert conflict.json["error"]["code"] == "idempotency_key_reused"
    [kept] = rows(engine, "SELECT other_body_sha256 FROM idempotency_conflicts")
    assert bytes(kept.other_body_sha256) == hashlib.sha256(dumps(changed)).digest()
    assert rows(engine, "SELECT count(*) FROM events")[0][0] == 1


# --------------------------------------------------------------------------- no id


def send(client, src, name: str, event_id: str, ts: int) -> object:
    s = SIGNERS[name]
    headers, body = s.request(event_id, ts, "http://localhost" + src.path)
    return client.post(src.path, data=body, headers=headers)


@pytest.mark.parametrize("name", ["zoom", "lemonsqueezy", "discord"])
def test_a_byte_identical_retry_without_any_id_runs_the_playbook_once(
    client, make_source, engine, wsettings, sink_table, name
):
    src = make_source(scheme=name, secrets_=(SIGNERS[name].secret,), playbook="flaky")
    now = int(time.time())
    first = send(client, src, name, "meeting-1", now)
    assert first.status_code in (200, 204)
    drain_once(Runtime(wsettings, engine))  # the first delivery is processed before the retry
    for delay in (1, 2):  # the provider retries, signing anew, the body unchanged
        retry = send(client, src, name, "meeting-1", now + delay)
        assert retry.headers["Idempotent-Replayed"] == "true"
        assert retry.status_code == first.status_code
    send(client, src, name, "meeting-2", now)
    drain_once(Runtime(wsettings, engine))
    effects = sink_rows(engine)
    assert sorted(r.step for r in effects) == ["work", "work"]
    assert len({r.event for r in effects}) == 2  # one effect per event, not per delivery


def hmac_post(client, src, payload: dict, key: str | None = None, ts: int | None = None):
    body = body_of(payload)
    return client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key, ts))


def test_a_source_keys_its_own_systems_deliveries_by_body_when_it_asks(
    client, make_source, engine, wsettings, sink_table
):
    plain = make_source(playbook="flaky")  # the generic default: at-least-once
    keyed = make_source(playbook="flaky", body_identity=True, require_idempotency_key=True)
    now = int(time.time())
    for src in (plain, keyed):
        for delay in (0, 1):
            assert hmac_post(client, src, {"order": "o-1"}, ts=now + delay).status_code == 202
    drain_once(Runtime(wsettings, engine))
    by_source = rows(engine, "SELECT source_id, count(*) FROM events GROUP BY source_id")
    assert dict((r[0], r[1]) for r in by_source) == {plain.id: 2, keyed.id: 1}
    assert len(sink_rows(engine)) == 3  # twice for the plain source, once for the keyed
    # An Idempotency-Key, when sent, still wins over the body.
    assert hmac_post(client, keyed, {"order": "o-1"}, key="k-2").status_code == 202
    assert rows(engine, f"SELECT count(*) FROM events WHERE source_id = {keyed.id}")[0][0] == 2


def test_identity_paths_key_a_restamping_sender_by_the_fields_named(client, make_source, engine):
    src = make_source(identity_paths=["order", "action"])
    first = hmac_post(client, src, {"order": "o-1", "action": "paid", "sent_at": 1})
    retry = hmac_post(client, src, {"order": "o-1", "action": "paid", "sent_at": 2})
    assert retry.headers["Idempotent-Replayed"] == "true" and retry.data == first.data
    other = hmac_post(client, src, {"order": "o-1", "action": "refunded", "sent_at": 3})
    assert "Idempotent-Replayed" not in other.headers
    assert rows(engine, "SELECT count(*) FROM events")[0][0] == 2


# --------------------------------------------------------------------------- rotation


def rotated(engine, make_source, scheme: str, old: str, new: str):
    """A source created with ``old``, then given ``new`` as ``inbox sources rotate`` does."""
    src = make_source(scheme=scheme, secrets_=(old,))
    with engine.begin() as conn:
        store.add_secret(conn, src, new)
    return src


def stripe_headers(secret: str, body: bytes, ts: int) -> dict[str, str]:
    return {"stripe-signature": f"t={ts},v1={hx(secret, f'{ts}.'.encode() + body)}"}


def whsec(raw: bytes) -> str:
    return "whsec_" + base64.b64encode(raw).decode()


def svix_headers(secret: str, body: bytes, ts: int, msg_id: str) -> dict[str, str]:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    sig = b64(mac(key, f"{msg_id}.{ts}.".encode() + body))
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": f"v1,{sig}"}


def ed_key(seed: bytes) -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.from_private_bytes(hashlib.sha256(seed).digest())


def ed_public_hex(key: ed25519.Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return raw.hex()


def discord_headers(key: ed25519.Ed25519PrivateKey, body: bytes, ts: int) -> dict[str, str]:
    sig = key.sign(str(ts).encode() + body).hex()
    return {"x-signature-ed25519": sig, "x-signature-timestamp": str(ts)}


def ec_public_b64(key: ec.EllipticCurvePrivateKey) -> str:
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return b64(der)


def sendgrid_headers(key: ec.EllipticCurvePrivateKey, body: bytes, ts: int) -> dict[str, str]:
    sig = b64(key.sign(str(ts).encode() + body, ec.ECDSA(hashes.SHA256())))
    return {
        "x-twilio-email-event-webhook-signature": sig,
        "x-twilio-email-event-webhook-timestamp": str(ts),
    }


def _family(name: str):
    """(scheme, the source's secrets [old, new, a stranger's], what signs with each, sign)."""
    if name == "hmac":
        keys = ["whsec_old", "whsec_new", "whsec_stranger"]
        return "stripe", keys, keys, lambda k, body, ts, n: stripe_headers(k, body, ts)
    if name == "standard":
        keys = [whsec(bytes([i]) * 32) for i in (1, 2, 3)]
        return "standard", keys, keys, lambda k, body, ts, n: svix_headers(k, body, ts, f"msg_{n}")
    if name == "ed25519":
        privs = [ed_key(s) for s in (b"old", b"new", b"stranger")]
        return "discord", [ed_public_hex(k) for k in privs], privs, discord_headers_n
    privs = [ec.derive_private_key(i, ec.SECP256R1()) for i in (1001, 1002, 1003)]
    return "sendgrid", [ec_public_b64(k) for k in privs], privs, sendgrid_headers_n


def discord_headers_n(key, body, ts, n):
    return discord_headers(key, body, ts)


def sendgrid_headers_n(key, body, ts, n):
    return sendgrid_headers(key, body, ts)


def family_body(scheme: str, n: int) -> bytes:
    if scheme == "stripe":
        return dumps({"id": f"evt_{n}", "type": "charge.succeeded"})
    if scheme == "sendgrid":
        return dumps([{"sg_event_id": f"sg_{n}", "event": "delivered"}])
    if scheme == "discord":
        return dumps({"version": 1, "type": 1, "event": {"type": "X", "data": {"n": n}}})
    return dumps({"type": "user.created", "n": n})


@pytest.mark.parametrize("family", ["hmac", "standard", "ed25519", "ecdsa"])
def test_during_a_rotation_old_and_new_secrets_verify_and_a_third_does_not(
    client, make_source, engine, family
):
    scheme, secrets_, signing, sign = _family(family)
    src = rotated(engine, make_source, scheme, secrets_[0], secrets_[1])
    ts = int(time.time())
    answers = []
    for n, key in enumerate(signing):
        body = family_body(scheme, n)
        headers = {"Content-Type": "application/json", **sign(key, body, ts, n)}
        answers.append(client.post(src.path, data=body, headers=headers).status_code)
    ok = 204 if scheme == "discord" else 202  # Discord's webhook events: 204, no body
    assert answers == [ok, ok, 401], answers
    assert rows(engine, "SELECT count(*) FROM events")[0][0] == 2


def test_standard_webhooks_verifies_two_public_keys_during_a_rotation(client, make_source, engine):
    privs = [ed_key(s) for s in (b"v1a-old", b"v1a-new", b"v1a-stranger")]
    whpk = [
        "whpk_"
        + base64.b64encode(
            k.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        ).decode()
        for k in privs
    ]
    src = rotated(engine, make_source, "standard", whpk[0], whpk[1])
    ts = int(time.time())
    answers = []
    for n, key in enumerate(privs):
        body, msg_id = dumps({"type": "user.created", "n": n}), f"msg_{n}"
        sig = b64(key.sign(f"{msg_id}.{ts}.".encode() + body))
        headers = {"Content-Type": "application/json", "webhook-id": msg_id,
                   "webhook-timestamp": str(ts), "webhook-signature": f"v1a,{sig}"}  # fmt: skip
        answers.append(client.post(src.path, data=body, headers=headers).status_code)
    assert answers == [202, 202, 401]
    assert rows(engine, "SELECT count(*) FROM events")[0][0] == 2


def test_an_operators_recipe_answers_with_its_own_accept_status(client, make_source, engine):
    recipe = {
        "name": "acme",
        "signature": "header:acme-signature",
        "event_id": ["header:acme-delivery"],
        "accept_status": 204,
        "accept_docs": "https://docs.acme.example/webhooks#respond: 204 No Content",
    }
    src = make_source(scheme="recipe", secrets_=("acme-secret",), recipe=recipe)
    body = dumps({"type": "payment.succeeded"})
    headers = {"Content-Type": "application/json", "Acme-Signature": hx("acme-secret", body),
               "Acme-Delivery": "d-1"}  # fmt: skip
    first = client.post(src.path, data=body, headers=headers)
    again = client.post(src.path, data=body, headers=headers)
    assert (first.status_code, first.data, again.status_code, again.data) == (204, b"", 204, b"")
    assert again.headers["Idempotent-Replayed"] == "true"
    assert rows(engine, "SELECT response_status FROM events")[0][0] == 204
