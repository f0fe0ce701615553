"""Published vectors of the built-in providers (tests/data/vectors/providers.json): each
passes as published and fails with one changed body byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inbox.domain import jsonpath
from inbox.domain.signatures import SchemeConfig, SignatureError, SignedRequest, get_scheme

DATA = json.loads(
    (Path(__file__).resolve().parent.parent / "data/vectors/providers.json").read_text()
)
CASES = DATA["cases"]


def _req(case: dict[str, Any], body: bytes) -> SignedRequest:
    headers = {"content-type": case["content_type"], **case["headers"]}
    return SignedRequest("POST", case["url"], headers, body)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['scheme']}")
def test_published_vector_passes(case: dict[str, Any]) -> None:
    scheme = get_scheme(case["scheme"])
    body = case["body"].encode()
    config = SchemeConfig((case["secret"],), public_url=None)
    verified = scheme.verify(_req(case, body), config, case["now"])
    if "event_id" in case:
        got = verified.event_id or jsonpath.get_text(json.loads(body), scheme.event_id_path or "")
        assert got == case["event_id"]
    if "event_type" in case:
        assert (
            jsonpath.get_text(json.loads(body), scheme.event_type_path or "") == case["event_type"]
        )


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['scheme']}")
def test_published_vector_with_a_changed_byte_fails(case: dict[str, Any]) -> None:
    body = bytearray(case["body"].encode())
    body[3] ^= 0x20
    with pytest.raises(SignatureError):
        get_scheme(case["scheme"]).verify(
            _req(case, bytes(body)), SchemeConfig((case["secret"],)), case["now"]
        )


def test_paddle_keeps_the_secret_prefix() -> None:
    [case] = [c for c in CASES if c["scheme"] == "paddle"]
    stripped = case["secret"].removeprefix("pdl_")
    with pytest.raises(SignatureError):
        get_scheme("paddle").verify(
            _req(case, case["body"].encode()), SchemeConfig((stripped,)), case["now"]
        )


def test_standard_v1a_needs_the_public_key_and_v1a_entries() -> None:
    [case] = [c for c in CASES if c["scheme"] == "standard"]
    body = case["body"].encode()
    scheme = get_scheme("standard")
    only_v1 = case | {"headers": case["headers"] | {"webhook-signature": "v1,bm9wZQ=="}}
    with pytest.raises(SignatureError):
        scheme.verify(_req(only_v1, body), SchemeConfig((case["secret"],)), case["now"])
    # An HMAC secret beside the key: the v1a entry still verifies against the key.
    both = SchemeConfig(("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", case["secret"]))
    scheme.verify(_req(case, body), both, case["now"])
    with pytest.raises(SignatureError):  # outside the window
        scheme.verify(_req(case, body), SchemeConfig((case["secret"],)), case["now"] + 301)
