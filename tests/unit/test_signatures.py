"""Signature schemes: published vectors, per-scheme rules, and a fuzz test.

Signatures for schemes without a published vector are built here by each provider's
documented algorithm, written independently of ``inbox.signatures``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from inbox.domain.signatures import (
    SCHEMES,
    Scheme,
    SignatureError,
    Verified,
    get_scheme,
)
from inbox.domain.signatures._common import check_window
from tests.unit.signing import NOW, cfg, fails, hex256, passes, req

# --------------------------------------------------------------------------- registry


def test_registry_names_and_lookup() -> None:
    original = {"standard", "stripe", "github", "shopify", "slack", "twilio", "token", "hmac"}
    assert original | {"none", "recipe"} <= set(SCHEMES)
    assert len(set(SCHEMES) - original - {"none", "recipe"}) >= 20  # #16
    for name, scheme in SCHEMES.items():
        assert isinstance(scheme, Scheme)
        assert scheme.name == name
        assert get_scheme(name) is scheme
    with pytest.raises(KeyError):
        get_scheme("nope")


def test_only_none_is_insecure() -> None:
    assert [n for n, s in SCHEMES.items() if s.insecure] == ["none"]


def test_timestamped_flags() -> None:
    timestamped = {n for n, s in SCHEMES.items() if s.timestamped}
    assert {"standard", "stripe", "slack", "hmac"} <= timestamped
    assert {"github", "shopify", "twilio", "token", "none"}.isdisjoint(timestamped)


def test_body_paths() -> None:
    assert (SCHEMES["stripe"].event_id_path, SCHEMES["stripe"].event_type_path) == ("id", "type")
    assert (SCHEMES["slack"].event_id_path, SCHEMES["slack"].event_type_path) == (
        "event_id",
        "event.type",
    )
    assert SCHEMES["github"].event_id_path is None


@pytest.mark.parametrize(
    ("scheme", "content_type", "ok"),
    [
        ("standard", "application/json", True),
        ("standard", "Application/JSON; charset=utf-8", True),
        ("standard", "application/cloudevents+json", True),
        ("standard", "text/plain", False),
        ("standard", "text/x+json", False),
        ("standard", None, False),
        ("stripe", "application/json", True),
        ("stripe", "application/cloudevents+json", False),
        ("slack", "application/x-www-form-urlencoded", True),
        ("github", "application/x-www-form-urlencoded", True),
        ("github", "multipart/form-data", False),
        ("twilio", "application/x-www-form-urlencoded; charset=utf-8", True),
        ("twilio", "application/json", True),
    ],
)
def test_accepts(scheme: str, content_type: str | None, ok: bool) -> None:
    assert get_scheme(scheme).accepts(content_type) is ok


# --------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    "text", ["", "abc", "1.5", "-1", "+5", " 1700000000", "1e9", "9" * 40, "\u0661\u0662"]
)
def test_check_window_rejects_non_integers(text: str) -> None:
    with pytest.raises(SignatureError):
        check_window(text, NOW, 300)


def test_check_window_bounds() -> None:
    assert check_window(str(NOW + 300), NOW, 300) == NOW + 300
    assert check_window(str(NOW - 300), NOW, 300) == NOW - 300
    for ts in (NOW + 301, NOW - 301):
        with pytest.raises(SignatureError):
            check_window(str(ts), NOW, 300)


# --------------------------------------------------------------------------- standard

SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TS = 1614265330
SW_BODY = b'{"test": 2432232314}'
SW_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
SW_OTHER = "whsec_" + base64.b64encode(b"another-secret-of-32-bytes-long!").decode()


def sw_headers(sig: str = SW_SIG, prefix: str = "webhook-") -> dict[str, str]:
    return {prefix + "id": SW_ID, prefix + "timestamp": str(SW_TS), prefix + "signature": sig}


def sw_sign(secret: str, msg_id: str, ts: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def test_standard_published_vector() -> None:
    assert sw_sign(SW_SECRET, SW_ID, SW_TS, SW_BODY) == SW_SIG  # the test's own signer agrees
    v = passes("standard", req(sw_headers(), SW_BODY), cfg(SW_SECRET), now=SW_TS)
    assert v == Verified(event_id=SW_ID)


@pytest.mark.parametrize("now", [SW_TS + 301, SW_TS - 301])
def test_standard_outside_window(now: int) -> None:
    fails("standard", req(sw_headers(), SW_BODY), cfg(SW_SECRET), now=now)


@pytest.mark.parametrize("now", [SW_TS + 300, SW_TS - 300])
def test_standard_window_edges_pass(now: int) -> None:
    passes("standard", req(sw_headers(), SW_BODY), cfg(SW_SECRET), now=now)


def test_standard_tolerance_is_configurable() -> None:
    r = req(sw_headers(), SW_BODY)
    passes("standard", r, cfg(SW_SECRET, tolerance=1000), now=SW_TS + 900)
    fails("standard", r, cfg(SW_SECRET, tolerance=10), now=SW_TS + 11)


def test_standard_skips_other_versions_and_commaless_entries() -> None:
    r = req(sw_headers("v2,xxx nocomma v1,!!notbase64!! " + SW_SIG), SW_BODY)
    passes("standard", r, cfg(SW_SECRET), now=SW_TS)


def test_standard_match_in_first_entry_with_first_secret() -> None:
    r = req(sw_headers(SW_SIG + " v1," + SW_SIG[3:].lower()), SW_BODY)
    passes("standard", r, cfg(SW_SECRET, SW_OTHER), now=SW_TS)


def test_standard_only_other_versions_fails() -> None:
    fails("standard", req(sw_headers("v2," + SW_SIG[3:]), SW_BODY), cfg(SW_SECRET), now=SW_TS)


def test_standard_one_byte_changed_body_fails() -> None:
    body = SW_BODY.replace(b"4", b"5", 1)
    assert len(body) == len(SW_BODY) and body != SW_BODY
    fails("standard", req(sw_headers(), body), cfg(SW_SECRET), now=SW_TS)


def test_standard_wrong_secret_and_rotation() -> None:
    r = req(sw_headers(), SW_BODY)
    fails("standard", r, cfg(SW_OTHER), now=SW_TS)
    passes("standard", r, cfg(SW_OTHER, SW_SECRET), now=SW_TS)


def test_standard_rotation_signed_by_new_secret() -> None:
    sig = sw_sign(SW_OTHER, SW_ID, SW_TS, SW_BODY)
    passes("standard", req(sw_headers(sig), SW_BODY), cfg(SW_SECRET, SW_OTHER), now=SW_TS)


def test_standard_svix_header_names() -> None:
    v = passes("standard", req(sw_headers(prefix="svix-"), SW_BODY), cfg(SW_SECRET), now=SW_TS)
    assert v.event_id == SW_ID


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_standard_missing_header(missing: str) -> None:
    headers = sw_headers()
    del headers[missing]
    fails("standard", req(headers, SW_BODY), cfg(SW_SECRET), now=SW_TS)


def test_standard_id_is_signed() -> None:
    headers = sw_headers() | {"webhook-id": "msg_other"}
    fails("standard", req(headers, SW_BODY), cfg(SW_SECRET), now=SW_TS)


@pytest.mark.parametrize("secret", ["whsec_", "whsec_!!!", "whsec_a", ""])
def test_standard_bad_secret(secret: str) -> None:
    fails("standard", req(sw_headers(), SW_BODY), cfg(secret), now=SW_TS)


def test_standard_non_utf8_body() -> None:
    fails("standard", req(sw_headers(), b"\xff\xfe"), cfg(SW_SECRET), now=SW_TS)


# --------------------------------------------------------------------------- stripe

ST_SECRET = "whsec_stripe_test_secret"
ST_BODY = b'{"id": "evt_1", "type": "charge.succeeded"}'


def stripe_header(secret: str, body: bytes, ts: int = NOW, extra: str = "") -> str:
    return f"t={ts},v1={hex256(secret, f'{ts}.'.encode() + body)}{extra}"


def test_stripe_pass() -> None:
    h = {"stripe-signature": stripe_header(ST_SECRET, ST_BODY, extra=",v0=deadbeef")}
    assert passes("stripe", req(h, ST_BODY), cfg(ST_SECRET)) == Verified()


def test_stripe_several_v1_any_matches() -> None:
    good = stripe_header(ST_SECRET, ST_BODY)
    h = {"stripe-signature": f"t={NOW},v1={'0' * 64}," + good.split(",", 1)[1]}
    passes("stripe", req(h, ST_BODY), cfg(ST_SECRET))


def test_stripe_wrong_secret_tamper_rotation() -> None:
    h = {"stripe-signature": stripe_header("whsec_new", ST_BODY)}
    fails("stripe", req(h, ST_BODY), cfg(ST_SECRET))
    fails("stripe", req(h, ST_BODY + b" "), cfg(ST_SECRET, "whsec_new"))
    passes("stripe", req(h, ST_BODY), cfg(ST_SECRET, "whsec_new"))
    passes("stripe", req(h, ST_BODY), cfg("whsec_new", ST_SECRET))  # match need not be last


@pytest.mark.parametrize("ts", [NOW - 301, NOW + 301])
def test_stripe_stale_or_future(ts: int) -> None:
    h = {"stripe-signature": stripe_header(ST_SECRET, ST_BODY, ts=ts)}
    fails("stripe", req(h, ST_BODY), cfg(ST_SECRET))
    passes("stripe", req(h, ST_BODY), cfg(ST_SECRET, tolerance=301))


@pytest.mark.parametrize(
    "value",
    [
        "",
        f"t={NOW}",
        f"v1={hex256(ST_SECRET, ST_BODY)}",
        f"t={NOW},v0={hex256(ST_SECRET, f'{NOW}.'.encode() + ST_BODY)}",
        stripe_header(ST_SECRET, ST_BODY) + f",t={NOW}",
    ],
)
def test_stripe_malformed_headers(value: str) -> None:
    fails("stripe", req({"stripe-signature": value}, ST_BODY), cfg(ST_SECRET))


def test_stripe_missing_header() -> None:
    fails("stripe", req({}, ST_BODY), cfg(ST_SECRET))


# --------------------------------------------------------------------------- github

GH_SECRET = "It's a Secret to Everybody"
GH_BODY = b"Hello, World!"
GH_SIG = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_github_published_vector() -> None:
    h = {"x-hub-signature-256": GH_SIG, "x-github-delivery": "d-1", "x-github-event": "push"}
    v = passes("github", req(h, GH_BODY), cfg(GH_SECRET))
    assert v == Verified(event_id="d-1", event_type="push")


def test_github_uppercase_hex_and_rotation() -> None:
    h = {"x-hub-signature-256": "sha256=" + GH_SIG[7:].upper()}
    assert passes("github", req(h, GH_BODY), cfg("old", GH_SECRET)) == Verified()


def test_github_failures() -> None:
    h = {"x-hub-signature-256": GH_SIG}
    fails("github", req(h, GH_BODY), cfg("wrong"))
    fails("github", req(h, b"Hello, World?"), cfg(GH_SECRET))
    fails("github", req({}, GH_BODY), cfg(GH_SECRET))
    fails("github", req({"x-hub-signature-256": GH_SIG[7:]}, GH_BODY), cfg(GH_SECRET))
    fails("github", req({"x-hub-signature-256": "sha256="}, GH_BODY), cfg(GH_SECRET))
