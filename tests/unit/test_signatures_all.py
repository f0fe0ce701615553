"""Every scheme, through Scheme.verify, with a sender written from its provider's docs
(tests/signers.py): a valid delivery passes and yields the provider's own event id; one
changed byte fails; a stale timestamp fails where the scheme has one; a wrong key fails."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from inbox.domain import jsonpath
from inbox.domain.signatures import SCHEMES, SchemeConfig, SignatureError, SignedRequest
from tests.signers import SIGNERS, Signer

NOW = 1_700_000_000
URL = "https://hooks.example.com/hooks/acme/src"
SIGNED = sorted(set(SCHEMES) - {"none", "recipe"})


def request(s: Signer, headers: dict[str, str], body: bytes) -> SignedRequest:
    from urllib.parse import parse_qs

    form = parse_qs(body.decode()) if s.content_type.endswith("urlencoded") else {}
    return SignedRequest("POST", URL, headers, body, form)


def test_every_signed_scheme_has_a_sender() -> None:
    assert set(SIGNERS) == set(SIGNED)


@pytest.mark.parametrize("name", SIGNED)
def test_valid_delivery_passes_with_the_providers_event_id(name: str) -> None:
    s, scheme = SIGNERS[name], SCHEMES[name]
    headers, body = s.request("evt-123", NOW, URL)
    assert scheme.accepts(headers["content-type"])
    verified = scheme.verify(request(s, headers, body), SchemeConfig((s.secret,)), NOW)
    if s.dedup and name not in ("hmac", "token"):  # those two take the Idempotency-Key
        event_id = verified.event_id
        if event_id is None and scheme.event_id_path:
            event_id = jsonpath.get_text(json.loads(body), scheme.event_id_path)
        if name == "twilio":
            assert event_id == "evt-123"
        else:
            assert event_id == "evt-123", (verified, scheme.event_id_path)


@pytest.mark.parametrize("name", SIGNED)
def test_one_changed_byte_fails(name: str) -> None:
    s = SIGNERS[name]
    headers, body = s.tampered("evt-123", NOW, URL)
    with pytest.raises(SignatureError):
        SCHEMES[name].verify(request(s, headers, body), SchemeConfig((s.secret,)), NOW)


@pytest.mark.parametrize("name", [n for n in SIGNED if SCHEMES[n].timestamped])
def test_stale_timestamp_fails(name: str) -> None:
    s = SIGNERS[name]
    assert s.timestamped
    headers, body = s.request("evt-123", NOW - 3600, URL)
    with pytest.raises(SignatureError):
        SCHEMES[name].verify(request(s, headers, body), SchemeConfig((s.secret,)), NOW)
    # ... and the same delivery passes at its own time.
    SCHEMES[name].verify(request(s, headers, body), SchemeConfig((s.secret,)), NOW - 3600)


def test_timestamped_flags_match_the_senders() -> None:
    assert {n for n in SIGNED if SCHEMES[n].timestamped} == {
        n for n in SIGNED if SIGNERS[n].timestamped
    }


def stranger(name: str) -> str:
    """A valid secret of the same kind as the scheme's, that did not sign anything here."""
    if name.startswith("discord"):
        key = ed25519.Ed25519PrivateKey.from_private_bytes(b"s" * 32).public_key()
        return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    if name == "sendgrid":
        key = ec.derive_private_key(777, ec.SECP256R1()).public_key()
        der = key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return base64.b64encode(der).decode()
    if name in ("standard", "clerk", "resend"):
        return "whsec_" + base64.b64encode(b"k" * 32).decode()
    if name == "postmark":
        return "other-user:other-pass"
    return SIGNERS[name].secret + "-old"


@pytest.mark.parametrize("name", SIGNED)
def test_every_active_secret_verifies_during_a_rotation_and_no_other(name: str) -> None:
    s = SIGNERS[name]
    headers, body = s.request("evt-123", NOW, URL)
    req = request(s, headers, body)
    other = SIGNERS["sendgrid" if name.startswith("discord") else "discord"].secret
    for secrets in (("not-the-secret",), (other,), (stranger(name),)):
        with pytest.raises(SignatureError):
            SCHEMES[name].verify(req, SchemeConfig(secrets), NOW)
    # Rotation: old and new are both active, in either order; the signer's one matches.
    for secrets in ((stranger(name), s.secret), (s.secret, stranger(name))):
        verified = SCHEMES[name].verify(req, SchemeConfig(secrets), NOW)
        assert verified.secret in (None, s.secret)


@pytest.mark.parametrize("name", SIGNED)
def test_every_scheme_says_what_it_verifies(name: str) -> None:
    assert len(SCHEMES[name].summary) > 10
