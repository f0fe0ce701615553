"""``prepare``: the ingest order of operations (415, 401, 400) and the row it builds."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest

from inbox.domain.errors import BadRequest, Unauthorized, UnsupportedMediaType
from inbox.domain.idempotency import body_sha256, key_digest
from inbox.domain.intake import Handshake, Prepared, prepare, signed_request
from inbox.domain.records import Source, SourceId, TenantId
from inbox.domain.sources import SourceOptions

NOW = 1_700_000_000.0
SECRET = "whsec_test"


def source(source_id: int = 3, **options: Any) -> Source:
    return Source(
        id=SourceId(source_id),
        tenant_id=TenantId(1),
        tenant="acme",
        name="orders",
        scheme="hmac",
        enabled=True,
        options=SourceOptions(**options),
        secrets=(SECRET,),
    )


def request(
    body: bytes,
    secret: str = SECRET,
    content_type: str = "application/json",
    **extra: str,
) -> Any:
    ts = str(int(NOW))
    sig = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    headers = {"content-type": content_type, "x-timestamp": ts, "x-signature": sig}
    headers.update({k.replace("_", "-"): v for k, v in extra.items()})
    return signed_request("POST", "https://inbox.test/hooks/acme/orders", headers, body)


def prepared(src: Source, req: Any) -> Prepared:
    result = prepare(src, req, NOW, default_key_ttl_hours=24)
    assert isinstance(result, Prepared)
    return result


def test_unsupported_content_type_is_415_before_the_signature_is_checked() -> None:
    req = request(b"a=1", secret="wrong", content_type="text/plain")
    with pytest.raises(UnsupportedMediaType):
        prepare(source(), req, NOW, 24)


def test_bad_signature_is_401_before_the_key_or_body_is_looked_at() -> None:
    req = request(b"not json", secret="wrong", idempotency_key="\x01bad")
    with pytest.raises(Unauthorized):
        prepare(source(), req, NOW, 24)


@pytest.mark.parametrize(
    ("body", "extra"),
    [
        (b"{}", {"idempotency_key": "x" * 256}),
        (b"{}", {"idempotency_key": "caf\u00e9"}),
        (b"not json", {}),
    ],
)
def test_malformed_key_or_body_is_400(body: bytes, extra: dict[str, str]) -> None:
    with pytest.raises(BadRequest):
        prepare(source(), request(body, **extra), NOW, 24)


def test_a_source_may_require_an_idempotency_key() -> None:
    with pytest.raises(BadRequest, match="Idempotency-Key"):
        prepare(source(require_idempotency_key=True), request(b"{}"), NOW, 24)
    assert prepared(source(require_idempotency_key=True), request(b"{}", idempotency_key="k1"))


def test_the_row_holds_digests_scoped_to_tenant_and_source() -> None:
    body = b'{"type": "order.paid", "id": 1}'
    ev = prepared(source(event_type_path="type"), request(body, idempotency_key="k1"))
    assert ev.key_digest == key_digest(1, 3, "k1")
    assert ev.key_digest != prepared(source(4), request(body, idempotency_key="k1")).key_digest
    assert ev.body == body and ev.body_sha256 == body_sha256(body)
    assert ev.event_type == "order.paid"
    assert ev.public_id.startswith("evt_")
    assert json.loads(ev.response_body) == {"id": ev.public_id, "status": "accepted"}
    assert ev.response_status == 202
    assert ev.key_expires_hours == 24


def test_the_provider_id_is_the_key_when_the_sender_gives_none() -> None:
    ev = prepared(source(event_id_path="id"), request(b'{"id": "ord_9"}'))
    assert ev.key_digest == key_digest(1, 3, "ord_9")
    assert prepared(source(), request(b'{"id": "ord_9"}')).key_digest is None


def test_signatures_and_secrets_are_not_stored_among_the_headers() -> None:
    req = request(b"{}", x_request_source="shop", authorization="Bearer abc", cookie="c=1")
    headers = prepared(source(), req).headers
    assert set(headers) == {"content-type", "x-timestamp", "x-request-source"}


def test_redacted_paths_are_stored_redacted_but_hashed_as_sent() -> None:
    body = b'{"card": {"number": "4242"}, "amount": 5}'
    ev = prepared(source(redact_paths=("card.number",)), request(body))
    assert b"4242" not in ev.body
    assert json.loads(ev.body)["amount"] == 5
    assert ev.body_sha256 == body_sha256(body)  # a resend of the same body still matches


def test_business_key_and_wait() -> None:
    body = b'{"account": "a1"}'
    opts = {"business_key_paths": ("account",)}
    one = prepared(source(**opts), request(body, prefer="wait=90"))
    two = prepared(source(**opts), request(body))
    assert one.business_key_digest is not None
    assert one.business_key_digest == two.business_key_digest
    assert one.wait_seconds == 30  # capped
    assert two.wait_seconds is None


def test_a_nul_in_the_event_type_is_400() -> None:
    with pytest.raises(BadRequest):
        prepare(source(event_type_path="t"), request(b'{"t": "a\\u0000b"}'), NOW, 24)


def test_prepare_never_answers_a_plain_post_with_a_handshake() -> None:
    assert not isinstance(prepare(source(), request(b"{}"), NOW, 24), Handshake)


# ----------------------------------------------------------------- identity without a key


def test_without_key_or_id_the_generic_scheme_keys_nothing_unless_the_source_asks() -> None:
    body = b'{"order":"o-1"}'
    assert prepared(source(), request(body)).key_digest is None  # at-least-once
    asked = prepared(source(body_identity=True), request(body))
    again = prepared(source(body_identity=True), request(body))
    assert asked.key_digest is not None and asked.key_digest == again.key_digest
    other = prepared(source(body_identity=True), request(b'{"order":"o-2"}'))
    assert other.key_digest != asked.key_digest
    # Never the digest an Idempotency-Key of the same text would get, nor another source's.
    assert asked.key_digest != key_digest(1, 3, body_sha256(body).hex())
    assert prepared(source(4, body_identity=True), request(body)).key_digest != asked.key_digest
    # A source that requires a key accepts a keyless delivery it asked to key by body.
    both = source(body_identity=True, require_idempotency_key=True)
    assert prepared(both, request(body)).key_digest == asked.key_digest
    with pytest.raises(BadRequest, match="Idempotency-Key"):
        prepare(source(require_idempotency_key=True), request(body), NOW, 24)


def test_identity_paths_key_by_the_named_fields_and_let_the_rest_change() -> None:
    src = source(identity_paths=("order", "action"))
    first = prepared(src, request(b'{"order":"o-1","action":"paid","sent_at":1}'))
    retry = prepared(src, request(b'{"order":"o-1","action":"paid","sent_at":2}'))
    other = prepared(src, request(b'{"order":"o-1","action":"refunded","sent_at":1}'))
    assert first.key_digest == retry.key_digest != other.key_digest
    assert first.match_sha256 == retry.match_sha256  # a copy, not a conflict
    assert first.body_sha256 != retry.body_sha256  # each keeps its raw bytes' hash
    # With an Idempotency-Key the fields play no part and the body must match exactly.
    keyed = prepared(src, request(b'{"order":"o-1"}', idempotency_key="k"))
    assert keyed.key_digest == key_digest(1, 3, "k") and keyed.match_sha256 is None


def test_a_204_scheme_stores_an_empty_answer_and_raw_hashes_stay_raw() -> None:
    src = Source(SourceId(3), TenantId(1), "acme", "tw", "twilio", True, SourceOptions(), ("t",))
    url = "https://inbox.test/hooks/acme/tw"
    params = "Body=hi&MessageSid=SM1"
    data = url + "BodyhiMessageSidSM1"
    sig = base64.b64encode(hmac.new(b"t", data.encode(), hashlib.sha1).digest()).decode()
    headers = {"content-type": "application/x-www-form-urlencoded", "x-twilio-signature": sig}
    ev = prepared(src, signed_request("POST", url, headers, params.encode()))
    assert (ev.response_status, ev.response_body) == (204, b"")
    assert ev.body_sha256 == body_sha256(params.encode()) and ev.match_sha256 is None
