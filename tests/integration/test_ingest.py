"""The ingest contract through the real Flask app against real PostgreSQL."""

from __future__ import annotations

import dataclasses
import json

import pytest
from sqlalchemy import Engine, text

from tests.helpers import EVENTS, body_of, hmac_headers

SECRET = "s3cret"


def rows(engine: Engine, sql: str = EVENTS + " ORDER BY e.id") -> list:
    with engine.connect() as conn:
        return list(conn.execute(text(sql)))


def post(client, src, payload=None, key: str | None = "k-1", body: bytes | None = None, **hdr):
    body = body if body is not None else body_of(payload if payload is not None else {"a": 1})
    return client.post(src.path, data=body, headers=hmac_headers(SECRET, body, key, **hdr))


def test_accepts_stores_once_and_rings_after_commit(client, make_source, engine, bell):
    src = make_source()
    resp = post(client, src, {"amount": 5})
    assert resp.status_code == 202
    assert resp.json["status"] == "accepted"
    assert resp.json["id"].startswith("evt_")
    assert "Idempotent-Replayed" not in resp.headers
    [row] = rows(engine)
    assert row.public_id == resp.json["id"]
    assert bytes(row.body) == body_of({"amount": 5})
    assert row.state == "received" and row.key_digest is not None
    assert bytes(row.response_body) == resp.data and row.response_status == 202
    assert bell.rings == 1


def test_duplicate_replays_the_stored_response_byte_for_byte(client, make_source, engine, bell):
    src = make_source()
    first = post(client, src, {"x": 1})
    second = post(client, src, {"x": 1})
    third = post(client, src, {"x": 1})
    assert second.status_code == third.status_code == first.status_code == 202
    assert second.data == first.data == third.data
    assert second.headers["Idempotent-Replayed"] == "true"
    [row] = rows(engine)
    assert row.duplicate_count == 2
    assert row.first_duplicate_at is not None and row.last_duplicate_at >= row.first_duplicate_at
    assert bell.rings == 1  # duplicates ring nothing


def test_a_duplicate_is_one_hot_update_of_its_key_and_reads_no_event(client, make_source, engine):
    """The duplicate path touches event_keys alone, and without writing an index."""
    from inbox.store.write.intake import _DUPLICATE, _duplicate_params
    from tests.integration.test_claims import _event

    src = make_source()
    assert post(client, src, {"x": 1}, key="hot").status_code == 202
    [key] = rows(engine, "SELECT key_digest, body_sha256 FROM event_keys")
    ev = dataclasses.replace(_event("hot"), key_digest=bytes(key[0]), body_sha256=bytes(key[1]))
    stats = text(
        "SELECT relname, n_tup_upd, n_tup_hot_upd, seq_scan + coalesce(idx_scan, 0)"
        " FROM pg_stat_xact_user_tables WHERE relname = 'event_keys' OR relname LIKE 'events%'"
    )
    # A connection's counts not yet flushed to the server's totals are shown too (they may
    # come from its earlier transactions), so the statement's own are the difference.
    with engine.begin() as conn:
        before = {r[0]: r[1:] for r in conn.execute(stats)}
        dup = conn.exec_driver_sql(_DUPLICATE, _duplicate_params(src, ev)).one()
        after = {r[0]: r[1:] for r in conn.execute(stats)}
    assert dup[-3:] == (False, None, None)  # not synchronous: no state, no key read
    delta = {
        name: tuple(a - b for a, b in zip(row, before.get(name, (0, 0, 0)), strict=True))
        for name, row in after.items()
    }
    touched = {name: d for name, d in delta.items() if any(d)}
    assert touched == {"event_keys": (1, 1, 1)}, touched  # one update, HOT, one index read


def test_same_key_different_body_is_422_and_recorded(client, make_source, engine):
    src = make_source()
    assert post(client, src, {"v": 1}).status_code == 202
    resp = post(client, src, {"v": 2})
    assert resp.status_code == 422
    assert resp.json["error"]["code"] == "idempotency_key_reused"
    resp = post(client, src, {"v": 2})
    assert resp.status_code == 422
    [row] = rows(engine)
    assert bytes(row.body) == body_of({"v": 1})  # never overwritten
    [conflict] = rows(engine, "SELECT * FROM idempotency_conflicts")
    assert conflict.count == 2 and conflict.event_id == row.id
    assert bytes(conflict.other_body_sha256) != bytes(row.body_sha256)


def test_keys_are_scoped_to_tenant_and_stored_only_as_digests(client, make_source, engine):
    a, b = make_source(), make_source()
    key = "+15551234567-alice@example.com"
    ra, rb = post(client, a, key=key), post(client, b, key=key)
    assert ra.status_code == rb.status_code == 202
    assert "Idempotent-Replayed" not in rb.headers and ra.json["id"] != rb.json["id"]
    assert len(rows(engine)) == 2
    with engine.connect() as conn:
        dump = conn.execute(text("SELECT e::text FROM events e")).scalars().all()
    assert not any("alice" in d or "5551234567" in d for d in dump)
    assert not any(key.encode().hex() in d for d in dump)


def test_provider_event_id_is_the_key_when_no_header(client, make_source, engine):
    src = make_source(scheme="none", secrets_=())
    body = body_of({"id": "evt_1", "type": "x"})
    h = {"Content-Type": "application/json"}
    r1 = client.post(src.path, data=body, headers={**h, "X-Ignored": "1"})
    assert r1.status_code == 202
    # `none` has no provider id: at-least-once, so a second copy is a second row
    r2 = client.post(src.path, data=body, headers=h)
    assert r2.status_code == 202 and "Idempotent-Replayed" not in r2.headers
    assert len(rows(engine)) == 2
    assert all(r.key_digest is None for r in rows(engine))


def test_require_idempotency_key_makes_a_missing_key_400(client, make_source, engine):
    src = make_source(require_idempotency_key=True)
    resp = post(client, src, key=None)
    assert resp.status_code == 400
    assert "Idempotency-Key" in resp.json["error"]["message"]
    assert rows(engine) == []


@pytest.mark.parametrize(
    "key", ["", "x" * 256, "caf\u00e9", "tab\there", "new\nline"], ids=str.__len__
)
def test_malformed_idempotency_key_is_400_and_stores_nothing(client, make_source, engine, key):
    src = make_source()
    body = body_of({"a": 1})
    headers = hmac_headers(SECRET, body)
    headers["Idempotency-Key"] = key
    try:
        resp = client.post(src.path, data=body, headers=headers)
    except ValueError:  # the test client itself refuses a newline in a header
        pytest.skip("header not sendable")
    assert resp.status_code == 400, resp.data
    assert resp.json["error"]["code"] == "bad_request"
    assert rows(engine) == []


def test_longest_valid_key_is_accepted(client, make_source):
    src = make_source()
    assert post(client, src, key="~" * 255).status_code == 202


def test_invalid_json_is_400_and_stores_nothing(client, make_source, engine):
    src = make_source()
    resp = post(client, src, body=b"{not json")
    assert (
        resp.status_code == 400 and resp.json["error"]["message"] == "The body is not valid JSON."
    )
    assert rows(engine) == []


@pytest.mark.parametrize("mangle", ["missing", "wrong", "stale", "future", "garbage"])
def test_bad_signature_is_a_uniform_401_and_occupies_no_key(client, make_source, engine, mangle):
    src = make_source()
    body = body_of({"a": 1})
    headers = hmac_headers(SECRET, body, "k-1")
    if mangle == "missing":
        del headers["X-Signature"]
    elif mangle == "wrong":
        headers = hmac_headers("other", body, "k-1")
    elif mangle == "stale":
        headers = hmac_headers(SECRET, body, "k-1", ts=int(headers["X-Timestamp"]) - 301)
    elif mangle == "future":
        # Past the 300 s window by more than a slow request can take to arrive (the window's
        # exact edges are tested in tests/unit/test_signatures.py).
        headers = hmac_headers(SECRET, body, "k-1", ts=int(headers["X-Timestamp"]) + 330)
    else:
        headers["X-Signature"] = "zz\u00ff"
    resp = client.post(src.path, data=body, headers=headers)
    assert resp.status_code == 401
    assert resp.json == {
        "error": {"code": "unauthorized", "message": "The request could not be authenticated."}
    }
    assert rows(engine) == []
    # the key was not occupied: a correctly signed delivery with it is a new event
    assert post(client, src, {"a": 1}).status_code == 202
    assert "Idempotent-Replayed" not in post(client, src, {"b": 1}, key="k-2").headers


def test_rotation_overlap_both_secrets_verify(client, make_source):
    src = make_source(secrets_=("old", "new"))
    for i, secret in enumerate(("old", "new")):
        body = body_of({"i": i})
        resp = client.post(src.path, data=body, headers=hmac_headers(secret, body, f"r{i}"))
        assert resp.status_code == 202


def test_order_404_405_413_415_401_400(client, make_source, engine, settings):
    src = make_source(max_body_bytes=64)
    big = b"{" + b" " * 100 + b"}"
    unsigned = {"Content-Type": "application/json", "Idempotency-Key": ""}
    signed_bad = hmac_headers(SECRET, b"{x", key="")
    cases = [
        (404, client.post("/hooks/nobody/nothing", data=big, headers=unsigned)),
        (404, client.post(f"/hooks/{src.tenant}/nothing", data=big, headers=unsigned)),
        (405, client.put(src.path, data=big, headers=unsigned)),
        (405, client.get(src.path)),
        (413, client.post(src.path, data=big, headers={**unsigned, "Content-Type": "a/b"})),
        (415, client.post(src.path, data=b"{}", headers={**unsigned, "Content-Type": "a/b"})),
        (401, client.post(src.path, data=b"{x", headers=unsigned)),
        (400, client.post(src.path, data=b"{x", headers=signed_bad)),
    ]
    for status, resp in cases:
        assert resp.status_code == status, (status, resp.data)
        assert resp.is_json and resp.json["error"]["message"]
    assert rows(engine) == []


def test_disabled_source_is_404(client, make_source, engine):
    from inbox.store.write.sources import set_enabled

    src = make_source()
    with engine.begin() as conn:
        set_enabled(conn, src, False)
    assert post(client, src).status_code == 404


def test_redaction_keeps_the_original_hash(client, make_source, engine):
    import hashlib

    src = make_source(redact_paths=["customer.phone", "card.number"])
    payload = {"customer": {"phone": "+15550001111", "id": "c1"}, "card": {"number": "4242"}}
    raw = body_of(payload)
    assert post(client, src, body=raw).status_code == 202
    [row] = rows(engine)
    stored = json.loads(bytes(row.body))
    assert stored["customer"] == {"phone": "[redacted]", "id": "c1"}
    assert stored["card"]["number"] == "[redacted]"
    assert bytes(row.body_sha256) == hashlib.sha256(raw).digest()
    # a retry of the same original bytes is still a duplicate, not a conflict
    assert post(client, src, body=raw).headers["Idempotent-Replayed"] == "true"


def test_headers_are_stored_without_secrets_signatures_or_keys(client, make_source, engine):
    src = make_source()
    body = body_of({"a": 1})
    headers = hmac_headers(
        SECRET,
        body,
        "secret-key-123",
        **{
            "Authorization": "Bearer abc",
            "X-Api-Token": "t0k",
            "User-Agent": "tests/1",
            "X-Request-Id": "r-1",
        },
    )
    assert client.post(src.path, data=body, headers=headers).status_code == 202
    [row] = rows(engine)
    stored = {k.lower() for k in row.headers}
    assert "user-agent" in stored and "x-request-id" in stored and "x-timestamp" in stored
    for gone in ("x-signature", "idempotency-key", "authorization", "x-api-token"):
        assert gone not in stored
    assert "secret-key-123" not in json.dumps(row.headers)


def test_event_type_and_business_key_from_paths(client, make_source, engine):
    src = make_source(event_type_path="kind", business_key_paths=["account.id"])
    post(client, src, {"kind": "sim.swap", "account": {"id": "acct-9"}}, key="a")
    post(client, src, {"kind": "sim.swap", "account": {"id": "acct-9"}, "n": 2}, key="b")
    post(client, src, {"kind": "sim.swap", "account": {"id": "acct-7"}}, key="c")
    r = rows(engine)
    assert [x.event_type for x in r] == ["sim.swap"] * 3
    assert bytes(r[0].business_key_digest) == bytes(r[1].business_key_digest)
    assert bytes(r[0].business_key_digest) != bytes(r[2].business_key_digest)
    assert b"acct-9" not in bytes(r[0].business_key_digest)


def test_an_event_type_with_a_nul_character_is_400_and_stores_nothing(client, make_source, engine):
    src = make_source(event_type_path="kind")
    resp = post(client, src, {"kind": "sim\u0000swap"}, key="a")
    assert resp.status_code == 400
    assert resp.json["error"]["message"] == "The event type contains a NUL character."
    assert rows(engine) == []


def test_key_window_pruned_key_is_a_new_event(client, make_source, engine):
    src = make_source()
    assert post(client, src, {"a": 1}).status_code == 202
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM event_keys"))  # as pruning does
        conn.execute(text("UPDATE events SET key_digest = NULL"))
    again = post(client, src, {"a": 1})
    assert again.status_code == 202 and "Idempotent-Replayed" not in again.headers
    assert len(rows(engine)) == 2
    with engine.connect() as conn:
        hours = conn.execute(
            text(
                "SELECT extract(epoch FROM k.expires_at - e.received_at) / 3600"
                " FROM event_keys k JOIN events e ON e.id = k.event_id"
            )
        ).scalar_one()
    assert round(float(hours)) == 24


def _twilio_signature(token: str, url: str, params: dict[str, str]) -> str:
    import base64
    import hashlib
    import hmac as hm

    data = url + "".join(k + params[k] for k in sorted(params))
    return base64.b64encode(hm.new(token.encode(), data.encode(), hashlib.sha1).digest()).decode()


@pytest.mark.parametrize("public_url", [None, "https://hooks.example.com"])
def test_twilio_signs_the_url_the_provider_called(client, make_source, engine, public_url):
    from urllib.parse import urlencode

    options = {"public_url": public_url} if public_url else {}
    src = make_source(scheme="twilio", secrets_=("auth-token",), **options)
    params = {"MessageSid": "SM1", "Body": "hello", "From": "+15550001111"}
    url = (public_url or "http://localhost") + src.path
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Twilio-Signature": _twilio_signature("auth-token", url, params),
        "I-Twilio-Idempotency-Token": "tw-1",
    }
    resp = client.post(src.path, data=urlencode(params), headers=headers)
    assert resp.status_code == 204, resp.data  # Twilio: 204, no body
    wrong = _twilio_signature("auth-token", "http://elsewhere" + src.path, params)
    resp = client.post(
        src.path, data=urlencode(params), headers={**headers, "X-Twilio-Signature": wrong}
    )
    assert resp.status_code == 401
    assert len(rows(engine)) == 1
