"""The four variants the providers' own verifiers accept (#16), from vendored vectors.

Each vector file under tests/data/vectors/ says where its cases come from: the provider's
SDK tests or docs, or derived here by the documented algorithm where none is published.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inbox.domain.signatures import SchemeConfig, SignatureError, SignedRequest, get_scheme
from inbox.domain.signatures.twilio import url_variants

VECTORS = Path(__file__).resolve().parent.parent / "data" / "vectors"
NOW = 1_700_000_000


def vectors(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / f"{name}.json").read_text())
    return data


TWILIO = vectors("twilio")


def tw_request(case: dict[str, Any]) -> SignedRequest:
    headers = {"x-twilio-signature": case["signature"]}
    if "settings" in case:
        headers["x-twilio-webhooks-signature-settings"] = case["settings"]
    return SignedRequest("POST", case["received_url"], headers, b"", TWILIO["params"])


@pytest.mark.parametrize("case", TWILIO["cases"], ids=lambda c: c["name"])
def test_twilio_vectors_pass(case: dict[str, Any]) -> None:
    get_scheme("twilio").verify(tw_request(case), SchemeConfig((TWILIO["token"],)), NOW)


@pytest.mark.parametrize("case", TWILIO["cases"], ids=lambda c: c["name"])
def test_twilio_vectors_fail_with_a_changed_param(case: dict[str, Any]) -> None:
    r = tw_request(case)
    changed = SignedRequest(r.method, r.url, r.headers, b"", {**r.form, "Digits": ["1235"]})
    with pytest.raises(SignatureError):
        get_scheme("twilio").verify(changed, SchemeConfig((TWILIO["token"],)), NOW)


def test_twilio_url_variants() -> None:
    assert url_variants("https://a.example/p?q=1") == [
        "https://a.example/p?q=1",
        "https://a.example:443/p?q=1",
    ]
    assert url_variants("http://a.example:80/p") == ["http://a.example:80/p", "http://a.example/p"]
    assert url_variants("https://a.example:8443") == [
        "https://a.example:8443",
        "https://a.example",
    ]
    # A custom port is never swapped for another custom port.
    assert all(":8444" not in u for u in url_variants("https://a.example:8443/x"))
    assert url_variants("https://[::1]/x") == ["https://[::1]/x", "https://[::1]:443/x"]


def test_twilio_sha256_needs_the_header_and_a_known_algorithm() -> None:
    [case] = [c for c in TWILIO["cases"] if "settings" in c]
    scheme, config = get_scheme("twilio"), SchemeConfig((TWILIO["token"],))
    without = {k: v for k, v in case.items() if k != "settings"}
    with pytest.raises(SignatureError):  # SHA-256 signature but no header: SHA-1 is expected
        scheme.verify(tw_request(without), config, NOW)
    for bad in ("algorithm=HMAC_SHA512", "key=KS1", "algorithm="):
        with pytest.raises(SignatureError):
            scheme.verify(tw_request({**case, "settings": bad}), config, NOW)
    # The header also accepts SHA-1 by name; the SDK vector then verifies as usual.
    plain = TWILIO["cases"][0] | {"settings": "key=KS1,algorithm=HMAC_SHA1"}
    scheme.verify(tw_request(plain), config, NOW)
    # The SharedKey's secret may sit beside the Auth Token during a migration.
    scheme.verify(tw_request(case), SchemeConfig(("shared-key-secret", TWILIO["token"])), NOW)


GITHUB = vectors("github")


@pytest.mark.parametrize("case", GITHUB["cases"], ids=lambda c: c["content_type"])
def test_github_vectors_json_and_form(case: dict[str, Any]) -> None:
    scheme = get_scheme("github")
    assert scheme.accepts(case["content_type"])
    headers = {"x-hub-signature-256": case["signature"], "content-type": case["content_type"]}
    config = SchemeConfig((case["secret"],))
    scheme.verify(SignedRequest("POST", "", headers, case["body"].encode()), config, NOW)
    tampered = case["body"].encode()[:-1] + b"X"
    with pytest.raises(SignatureError):
        scheme.verify(SignedRequest("POST", "", headers, tampered), config, NOW)


SHOPIFY = vectors("shopify")


@pytest.mark.parametrize("case", SHOPIFY["cases"], ids=lambda c: c["family"])
def test_shopify_both_header_families(case: dict[str, Any]) -> None:
    scheme, config = get_scheme("shopify"), SchemeConfig((case["secret"],))
    headers = case["headers"]
    verified = scheme.verify(SignedRequest("POST", "", headers, case["body"].encode()), config, NOW)
    prefix = "x-shopify-" if case["family"] == "classic" else "shopify-"
    assert verified.event_id == headers[prefix + "webhook-id"]
    assert verified.event_type == headers[prefix + "topic"]
    with pytest.raises(SignatureError):
        body = case["body"].encode() + b" "
        scheme.verify(SignedRequest("POST", "", headers, body), config, NOW)
