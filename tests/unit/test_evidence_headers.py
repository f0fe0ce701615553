"""What the verdict keeps of a request's headers: the provider's signature, never a credential."""

from __future__ import annotations

from inbox.domain import evidence
from inbox.domain.signatures import SCHEMES, SchemeConfig


def test_only_signature_headers_are_kept_and_never_a_secret_or_token() -> None:
    headers = {
        "stripe-signature": "t=1,v1=abc",
        "x-hub-signature-256": "sha256=def",
        "authorization": "Bearer tok",
        "cookie": "a=b",
        "x-api-key": "k",
        "x-gitlab-token": "tok",
        "x-custom-signature": "plain-secret-value",  # carries the secret itself
        "content-type": "application/json",
    }
    kept = evidence.signature_headers(SCHEMES["stripe"], headers, ("plain-secret-value",), None)
    assert kept == {"stripe-signature": "t=1,v1=abc", "x-hub-signature-256": "sha256=def"}
    # the source's token header, and every header of the token scheme, are never kept
    assert "x-hub-signature-256" not in evidence.signature_headers(
        SCHEMES["github"], headers, (), "x-hub-signature-256"
    )
    assert evidence.signature_headers(SCHEMES["token"], headers, (), None) == {}


def test_the_verdict_names_the_matching_secret_by_its_row_id() -> None:
    cfg = SchemeConfig(secrets=("old", "new"), tolerance=120)
    v = evidence.verdict(
        SCHEMES["stripe"],
        cfg,
        (11, 12),
        "new",
        1.5,
        b"\x01" * 32,
        b"\x02" * 32,
        {},
        "http://h",
        None,
    )
    assert v["secret_id"] == 12 and v["tolerance"] == 120 and v["checked_at"] == 1.5
    assert v["key_digest"] == "01" * 32 and v["url"] is None
    unmatched = evidence.verdict(SCHEMES["none"], cfg, (11, 12), None, 1.5, None, b"", {}, "", None)
    assert unmatched["secret_id"] is None and unmatched["tolerance"] is None
