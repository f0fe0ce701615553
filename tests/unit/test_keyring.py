"""The key-encryption keyring (Fernet), without a database."""

from __future__ import annotations

import stat

import pytest

from inbox.infra import keyring as kr


def test_encrypt_decrypt_rotate_across_keys():
    old, new = kr.new_key(), kr.new_key()
    stored = kr.Keyring([old]).encrypt("whsec_x")
    assert stored.startswith(kr.PREFIX) and "whsec_x" not in stored
    both = kr.Keyring([new, old])
    assert both.decrypt(stored) == "whsec_x" and not both.is_current(stored)
    rotated = both.rotate(stored)
    assert both.is_current(rotated) and kr.Keyring([new]).decrypt(rotated) == "whsec_x"
    with pytest.raises(kr.KeyInvalid):
        kr.Keyring([old]).decrypt(rotated)
    with pytest.raises(kr.KeyInvalid):
        both.decrypt("whsec_in_clear")
    assert both.rotate("clear").startswith(kr.PREFIX)  # a clear value gets encrypted


def test_no_key_is_refused_and_the_answer_does_not_say_why(monkeypatch):
    monkeypatch.delenv("INBOX_KEK", raising=False)
    with pytest.raises(kr.KeyMissing) as caught:
        kr.keyring()
    assert caught.value.http_status == 503
    assert "INBOX_KEK" in caught.value.message and "INBOX_KEK" not in repr(caught.value.body())
    monkeypatch.setenv("INBOX_KEK", "not-a-key")
    with pytest.raises(ValueError, match="32 url-safe"):
        kr.keyring()


def test_a_dev_key_is_made_once_and_kept_private(tmp_path):
    path = tmp_path / "sub" / "kek"
    first = kr.dev_key(path)
    assert kr.dev_key(path) == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    kr.Keyring([first])  # a valid key


def test_the_log_line_says_what_is_missing_and_is_not_redacted(monkeypatch):
    import io
    import json
    import logging

    from inbox.infra.logs import configure_logging

    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging("INFO", stream=stream)
        monkeypatch.setattr(kr.SecretsLocked, "_logged_at", 0.0)
        # (the CLI, run in-process by other tests, keeps this logger to itself)
        monkeypatch.setattr(logging.getLogger(kr.__name__), "propagate", True)
        monkeypatch.delenv("INBOX_KEK", raising=False)
        with pytest.raises(kr.KeyMissing):
            kr.keyring()
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    [line] = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert "INBOX_KEK is not set: signing secrets cannot be read" in line["message"]
    assert "inbox secrets keygen" in line["message"] and "[redacted]" not in line["message"]
