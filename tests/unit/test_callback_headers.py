"""The callback headers: a replay is marked outside the signature, and verifiers accept it."""

from __future__ import annotations

from datetime import UTC, datetime

from standardwebhooks import Webhook

from inbox.domain import callbacks


def test_webhook_replay_is_added_only_for_a_replay_and_the_signature_still_verifies() -> None:
    secret = callbacks.new_secret()
    body = b'{"id":"msg_1","type":"case.closed"}'
    now = datetime.now(UTC)
    original = callbacks.headers("msg_1", body, [secret], now)
    replayed = callbacks.headers("msg_1", body, [secret], now, replay=3)
    assert "webhook-replay" not in original
    assert replayed["webhook-replay"] == "3"
    # The same message id and signature: the header is not part of what is signed.
    assert replayed["webhook-id"] == original["webhook-id"] == "msg_1"
    assert replayed["webhook-signature"] == original["webhook-signature"]
    assert Webhook(secret).verify(body, replayed) == {"id": "msg_1", "type": "case.closed"}
