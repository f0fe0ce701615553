"""The envelope's AEAD: a sealed value opens only under its key, in its column, untouched;
data keys wrap and unwrap under the KEK and its rotation."""

from __future__ import annotations

import pytest

from inbox.infra import envelope
from inbox.infra.keyring import KeyInvalid, Keyring, new_key


def test_a_sealed_value_opens_only_under_its_key_and_column_untouched():
    raw = envelope.new_key()
    key = envelope.DataKey(7, raw)
    sealed = key.seal(b'{"name": "Jane Roe"}', "body")
    assert b"Jane" not in sealed and sealed[:1] == envelope.VERSION
    assert key.open(sealed, "body") == b'{"name": "Jane Roe"}'
    assert key.seal(b"x", "body") != key.seal(b"x", "body")  # a fresh nonce each time
    with pytest.raises(envelope.SealBroken):
        key.open(sealed, "headers")  # moved to another column
    with pytest.raises(envelope.SealBroken):
        envelope.DataKey(8, raw).open(sealed, "body")  # relabelled with another id
    flipped = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(envelope.SealBroken):
        key.open(flipped, "body")
    with pytest.raises(envelope.SealBroken):
        key.open(b"plain", "body")


def test_a_data_key_unwraps_under_any_listed_kek_and_not_once_its_kek_is_gone():
    old, new = new_key(), new_key()
    raw = envelope.new_key()
    wrapped = envelope.wrap(Keyring([old]), raw)
    assert envelope.unwrap(Keyring([new, old]), wrapped) == raw
    rewrapped = Keyring([new, old]).rotate(wrapped)
    assert envelope.unwrap(Keyring([new]), rewrapped) == raw
    with pytest.raises(KeyInvalid):
        envelope.unwrap(Keyring([new]), wrapped)
