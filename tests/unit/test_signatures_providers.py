"""Signature schemes, continued: Shopify, Slack, Twilio, token, tenant HMAC and none."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inbox.domain.signatures import (
    SCHEMES,
    SchemeConfig,
    SignatureError,
    SignedRequest,
    Verified,
    get_scheme,
)
from tests.signers import SIGNERS
from tests.unit.signing import NOW, URL, b64_256, cfg, fails, hex256, passes, req
from tests.unit.test_signatures import (
    GH_BODY,
    GH_SECRET,
    GH_SIG,
    ST_BODY,
    ST_SECRET,
    SW_BODY,
    SW_ID,
    SW_OTHER,
    SW_SECRET,
    stripe_header,
    sw_headers,
    sw_sign,
)

# --------------------------------------------------------------------------- shopify

SH_SECRET = "shpss_secret"
SH_BODY = b'{"id": 1}'


def test_shopify_pass_and_headers() -> None:
    h = {
        "x-shopify-hmac-sha256": b64_256(SH_SECRET, SH_BODY),
        "x-shopify-webhook-id": "wh-1",
        "x-shopify-event-id": "ev-1",
        "x-shopify-topic": "orders/create",
    }
    v = passes("shopify", req(h, SH_BODY), cfg(SH_SECRET))
    assert v == Verified(event_id="wh-1", event_type="orders/create")


def test_shopify_event_id_fallback() -> None:
    h = {"x-shopify-hmac-sha256": b64_256(SH_SECRET, SH_BODY), "x-shopify-event-id": "ev-1"}
    assert passes("shopify", req(h, SH_BODY), cfg(SH_SECRET)).event_id == "ev-1"


def test_shopify_failures_and_rotation() -> None:
    h = {"x-shopify-hmac-sha256": b64_256("new", SH_BODY)}
    fails("shopify", req(h, SH_BODY), cfg(SH_SECRET))
    fails("shopify", req(h, b'{"id": 2}'), cfg(SH_SECRET, "new"))
    passes("shopify", req(h, SH_BODY), cfg(SH_SECRET, "new"))
    fails("shopify", req({}, SH_BODY), cfg(SH_SECRET))
    fails("shopify", req({"x-shopify-hmac-sha256": "%%%"}, SH_BODY), cfg(SH_SECRET))


# --------------------------------------------------------------------------- slack

SL_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SL_BODY = b'{"type": "event_callback", "event_id": "Ev1", "event": {"type": "message"}}'


def slack_headers(secret: str, body: bytes, ts: int = NOW) -> dict[str, str]:
    sig = "v0=" + hex256(secret, f"v0:{ts}:".encode() + body)
    return {"x-slack-request-timestamp": str(ts), "x-slack-signature": sig}


def test_slack_pass_and_rotation() -> None:
    h = slack_headers(SL_SECRET, SL_BODY)
    assert passes("slack", req(h, SL_BODY), cfg(SL_SECRET)) == Verified()
    passes("slack", req(h, SL_BODY), cfg("old", SL_SECRET))


def test_slack_form_body() -> None:
    body = b"token=x&team_id=T1&command=%2Fweather&text=94070"
    passes("slack", req(slack_headers(SL_SECRET, body), body), cfg(SL_SECRET))


def test_slack_failures() -> None:
    h = slack_headers(SL_SECRET, SL_BODY)
    fails("slack", req(h, SL_BODY), cfg("wrong"))
    fails("slack", req(h, SL_BODY + b"\n"), cfg(SL_SECRET))
    fails("slack", req(slack_headers(SL_SECRET, SL_BODY, ts=NOW - 301), SL_BODY), cfg(SL_SECRET))
    fails("slack", req(slack_headers(SL_SECRET, SL_BODY, ts=NOW + 301), SL_BODY), cfg(SL_SECRET))
    for name in h:
        fails("slack", req({k: v for k, v in h.items() if k != name}, SL_BODY), cfg(SL_SECRET))
    no_prefix = h | {"x-slack-signature": h["x-slack-signature"][3:]}
    fails("slack", req(no_prefix, SL_BODY), cfg(SL_SECRET))


def test_slack_timestamp_is_signed() -> None:
    h = slack_headers(SL_SECRET, SL_BODY) | {"x-slack-request-timestamp": str(NOW + 1)}
    fails("slack", req(h, SL_BODY), cfg(SL_SECRET))


def test_slack_url_verification_challenge() -> None:
    slack = get_scheme("slack")
    r = req({}, b"")
    body = {"token": "t", "challenge": "3eZbrw1aB", "type": "url_verification"}
    assert slack.challenge(r, body) == (200, {"challenge": "3eZbrw1aB"})
    assert slack.challenge(r, {"type": "event_callback", "challenge": "x"}) is None
    assert slack.challenge(r, ["url_verification"]) is None
    assert slack.get_challenge(r, cfg(SL_SECRET)) is None
    assert get_scheme("github").challenge(r, body) is None


# --------------------------------------------------------------------------- twilio

# Published example (Twilio security docs / twilio-python tests): auth token 12345.
TW_TOKEN = "12345"
TW_URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
TW_PARAMS = {
    "CallSid": ["CA1234567890ABCDE"],
    "Caller": ["+12349013030"],
    "Digits": ["1234"],
    "From": ["+12349013030"],
    "To": ["+18005551212"],
}
TW_SIG = "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
TW_JSON = b'{"property": "value", "boolean": true}'
TW_JSON_HASH = "0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620"
TW_JSON_SIG = "a9nBmqA0ju/hNViExpshrM61xv4="


def twilio_sign(token: str, url: str, params: Mapping[str, list[str]]) -> str:
    data = url
    for key in sorted(params):
        for value in sorted(params[key]):
            data += key + value
    mac = hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(mac).decode()


def tw_req(sig: str, url: str = TW_URL, form: Mapping[str, list[str]] = TW_PARAMS) -> SignedRequest:
    return req({"x-twilio-signature": sig}, b"", url=url, form=form)


def test_twilio_published_vector() -> None:
    assert twilio_sign(TW_TOKEN, TW_URL, TW_PARAMS) == TW_SIG
    assert passes("twilio", tw_req(TW_SIG), cfg(TW_TOKEN)) == Verified()


def test_twilio_idempotency_token_is_event_id() -> None:
    r = req(
        {"x-twilio-signature": TW_SIG, "i-twilio-idempotency-token": "idem-1"},
        url=TW_URL,
        form=TW_PARAMS,
    )
    assert passes("twilio", r, cfg(TW_TOKEN)).event_id == "idem-1"


def test_twilio_failures_and_rotation() -> None:
    fails("twilio", tw_req(TW_SIG), cfg("wrong"))
    passes("twilio", tw_req(TW_SIG), cfg("wrong", TW_TOKEN))
    fails("twilio", tw_req(TW_SIG, form=TW_PARAMS | {"Digits": ["1235"]}), cfg(TW_TOKEN))
    fails("twilio", tw_req(TW_SIG, url=TW_URL + "&x=1"), cfg(TW_TOKEN))
    fails("twilio", req({}, url=TW_URL, form=TW_PARAMS), cfg(TW_TOKEN))


def test_twilio_parses_form_body_when_form_not_given() -> None:
    body = (
        b"To=%2B18005551212&From=%2B12349013030&Caller=%2B12349013030"
        b"&Digits=1234&CallSid=CA1234567890ABCDE"
    )
    h = {"x-twilio-signature": TW_SIG, "content-type": "application/x-www-form-urlencoded"}
    passes("twilio", req(h, body, url=TW_URL), cfg(TW_TOKEN))


def test_twilio_repeated_and_sorted_params() -> None:
    form = {"b": ["2"], "a": ["z", "y", "x"], "B": ["1"], "c": [""]}
    expected_data = TW_URL + "B1" + "ax" + "ay" + "az" + "b2" + "c"
    mac = hmac.new(TW_TOKEN.encode(), expected_data.encode(), hashlib.sha1).digest()
    sig = base64.b64encode(mac).decode()
    assert sig == twilio_sign(TW_TOKEN, TW_URL, form)
    passes("twilio", tw_req(sig, form=form), cfg(TW_TOKEN))
    # The order in which values arrive does not matter; the values themselves do.
    passes("twilio", tw_req(sig, form=form | {"a": ["x", "z", "y"]}), cfg(TW_TOKEN))
    fails("twilio", tw_req(sig, form=form | {"a": ["x", "y"]}), cfg(TW_TOKEN))


def test_twilio_public_url_replaces_scheme_and_host() -> None:
    public = "https://mycompany.com"
    internal = "http://10.0.0.5:8000/myapp.php?foo=1&bar=2"
    fails("twilio", tw_req(TW_SIG, url=internal), cfg(TW_TOKEN))
    passes("twilio", tw_req(TW_SIG, url=internal), cfg(TW_TOKEN, public_url=public))
    passes("twilio", tw_req(TW_SIG, url=internal), cfg(TW_TOKEN, public_url=public + "/"))
    fails("twilio", tw_req(TW_SIG, url=internal), cfg(TW_TOKEN, public_url="https://other.com"))


def test_twilio_public_url_with_port() -> None:
    url = "https://h.example:8443/hooks/acme/tw?x=1"
    sig = twilio_sign(TW_TOKEN, url, TW_PARAMS)
    r = tw_req(sig, url="http://localhost:5000/hooks/acme/tw?x=1")
    passes("twilio", r, cfg(TW_TOKEN, public_url="https://h.example:8443"))
    fails("twilio", r, cfg(TW_TOKEN, public_url="https://h.example"))


def test_twilio_json_body_sha256() -> None:
    assert hashlib.sha256(TW_JSON).hexdigest() == TW_JSON_HASH
    url = TW_URL + "&bodySHA256=" + TW_JSON_HASH
    h = {"x-twilio-signature": TW_JSON_SIG, "content-type": "application/json"}
    passes("twilio", req(h, TW_JSON, url=url), cfg(TW_TOKEN))
    fails("twilio", req(h, TW_JSON.replace(b"true", b"false"), url=url), cfg(TW_TOKEN))
    # Form params are not part of the signature when bodySHA256 is used.
    passes("twilio", req(h, TW_JSON, url=url, form={"x": ["1"]}), cfg(TW_TOKEN))


# --------------------------------------------------------------------------- token


def test_token_raw_and_bearer() -> None:
    assert passes("token", req({"authorization": "s3cret"}), cfg("s3cret")) == Verified()
    passes("token", req({"authorization": "Bearer s3cret"}), cfg("s3cret"))
    passes("token", req({"authorization": "bearer s3cret"}), cfg("s3cret"))


def test_token_failures_and_rotation() -> None:
    fails("token", req({"authorization": "Bearer nope"}), cfg("s3cret"))
    fails("token", req({"authorization": "s3cret2"}), cfg("s3cret"))
    fails("token", req({}), cfg("s3cret"))
    fails("token", req({"authorization": "Bearer "}), cfg(""))
    passes("token", req({"authorization": "Bearer new"}), cfg("old", "new"))


def test_token_custom_header() -> None:
    c = cfg("s3cret", header="x-api-key")
    passes("token", req({"x-api-key": "s3cret"}), c)
    fails("token", req({"authorization": "s3cret"}), c)
    fails("token", req({"x-api-key": "Bearer s3cret"}), c)


def test_token_okta_get_challenge() -> None:
    token = get_scheme("token")
    h = {"authorization": "okta-token", "x-okta-verification-challenge": "chal-123"}
    get = req(h, b"", method="GET")
    assert token.get_challenge(get, cfg("okta-token")) == (200, {"verification": "chal-123"})
    with pytest.raises(SignatureError):
        token.get_challenge(get, cfg("other"))
    plain_get = req({"authorization": "okta-token"}, b"", method="GET")
    assert token.get_challenge(plain_get, cfg("okta-token")) is None


# --------------------------------------------------------------------------- hmac / none

HM_SECRET = "tenant-secret"
HM_BODY = b'{"order": 7}'


def hmac_headers(secret: str, body: bytes, ts: int = NOW) -> dict[str, str]:
    return {"x-timestamp": str(ts), "x-signature": hex256(secret, f"{ts}.".encode() + body)}


def test_hmac_scheme() -> None:
    h = hmac_headers(HM_SECRET, HM_BODY)
    assert passes("hmac", req(h, HM_BODY), cfg(HM_SECRET)) == Verified()
    passes("hmac", req(h, HM_BODY), cfg("old", HM_SECRET))
    fails("hmac", req(h, HM_BODY), cfg("wrong"))
    fails("hmac", req(h, HM_BODY + b" "), cfg(HM_SECRET))
    fails("hmac", req(hmac_headers(HM_SECRET, HM_BODY, NOW - 301), HM_BODY), cfg(HM_SECRET))
    fails("hmac", req({"x-signature": h["x-signature"]}, HM_BODY), cfg(HM_SECRET))
    fails("hmac", req({"x-timestamp": h["x-timestamp"]}, HM_BODY), cfg(HM_SECRET))


def test_none_scheme_always_passes() -> None:
    assert passes("none", req({}, b"\xff"), cfg()) == Verified()


def test_no_secrets_configured_fails() -> None:
    fails("github", req({"x-hub-signature-256": GH_SIG}, GH_BODY), cfg())
    fails("hmac", req(hmac_headers("", HM_BODY), HM_BODY), cfg(""))


# --------------------------------------------------------------------------- secrecy


def _bad_requests() -> list[tuple[str, SignedRequest, SchemeConfig, str]]:
    """(scheme, request, config, received signature) that fail only on the signature."""
    gh_sig = "sha256=" + hex256("wrong", GH_BODY)
    sh_sig = b64_256("wrong", SH_BODY)
    sl = slack_headers("wrong", SL_BODY)
    hm = hmac_headers("wrong", HM_BODY)
    st_h = stripe_header("wrong", ST_BODY)
    tw_sig = twilio_sign("wrong", TW_URL, TW_PARAMS)
    sw = sw_sign(SW_OTHER, SW_ID, NOW, SW_BODY)
    sw_h = sw_headers(sw) | {"webhook-timestamp": str(NOW)}
    return [
        ("github", req({"x-hub-signature-256": gh_sig}, GH_BODY), cfg(GH_SECRET), gh_sig),
        ("shopify", req({"x-shopify-hmac-sha256": sh_sig}, SH_BODY), cfg(SH_SECRET), sh_sig),
        ("slack", req(sl, SL_BODY), cfg(SL_SECRET), sl["x-slack-signature"]),
        ("hmac", req(hm, HM_BODY), cfg(HM_SECRET), hm["x-signature"]),
        ("stripe", req({"stripe-signature": st_h}, ST_BODY), cfg(ST_SECRET), st_h),
        ("twilio", tw_req(tw_sig), cfg(TW_TOKEN), tw_sig),
        ("standard", req(sw_h, SW_BODY), cfg(SW_SECRET), sw),
        ("token", req({"authorization": "guess"}), cfg("s3cret"), "guess"),
    ]


@pytest.mark.parametrize(("scheme", "request_", "config", "received"), _bad_requests())
def test_error_message_leaks_no_secret_or_signature(
    scheme: str, request_: SignedRequest, config: SchemeConfig, received: str
) -> None:
    with pytest.raises(SignatureError) as info:
        get_scheme(scheme).verify(request_, config, NOW)
    text = str(info.value) + repr(info.value)
    for secret in config.secrets:
        assert secret not in text
    assert received not in text
    assert info.value.__cause__ is None


def test_decoding_errors_become_signature_errors_without_context() -> None:
    h = {"x-twilio-signature": TW_SIG, "content-type": "application/x-www-form-urlencoded"}
    with pytest.raises(SignatureError) as info:
        get_scheme("twilio").verify(req(h, b"Body=%ff%fe", url=TW_URL), cfg(TW_TOKEN), NOW)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__ is True  # the decoder's error is not chained


# --------------------------------------------------------------------------- fuzz

HEADER_NAMES = [
    "webhook-id", "webhook-timestamp", "webhook-signature", "svix-id", "svix-timestamp",
    "svix-signature", "stripe-signature", "x-hub-signature-256", "x-github-delivery",
    "x-github-event", "x-shopify-hmac-sha256", "x-shopify-webhook-id", "x-shopify-topic",
    "x-slack-signature", "x-slack-request-timestamp", "x-twilio-signature",
    "i-twilio-idempotency-token", "authorization", "x-api-key",
    "x-okta-verification-challenge", "x-signature", "x-timestamp", "content-type",
]  # fmt: skip
# ... and every header a built-in sender sends (tests/signers.py).
HEADER_NAMES += sorted(
    {name for s in SIGNERS.values() for name in s.request("e", NOW, URL)[0]} - set(HEADER_NAMES)
)

_ts = st.one_of(st.integers(-(10**20), 10**20).map(str), st.just(str(NOW)), st.text(max_size=20))
_b64 = st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode())
_hex = st.binary(max_size=40).map(bytes.hex)
_sigish = st.one_of(_b64, _hex, st.text(max_size=60))
_header_value = st.one_of(
    st.text(max_size=80),
    _ts,
    _sigish,
    st.builds(lambda t, s: f"t={t},v1={s}", _ts, _sigish),
    st.builds(lambda s: f"v1,{s} v2,{s} v1", _sigish),
    st.builds(lambda s: "sha256=" + s, _sigish),
    st.builds(lambda s: "v0=" + s, _sigish),
    st.builds(lambda s: "Bearer " + s, st.text(max_size=20)),
    st.sampled_from(["application/x-www-form-urlencoded", "application/json", "v1", ""]),
)
_headers = st.dictionaries(
    st.one_of(st.sampled_from(HEADER_NAMES), st.text(max_size=10)), _header_value, max_size=8
)
_url = st.one_of(
    st.just(URL),
    st.builds(lambda q: URL + "?bodySHA256=" + q, st.one_of(_hex, st.text(max_size=70))),
    st.text(max_size=40),
)
_secret = st.one_of(st.text(max_size=30), st.builds(lambda s: "whsec_" + s, st.text(max_size=44)))
_cfg = st.builds(
    SchemeConfig,
    secrets=st.lists(_secret, max_size=3).map(tuple),
    tolerance=st.integers(-10, 10**16),
    header=st.one_of(st.none(), st.sampled_from(HEADER_NAMES), st.text(max_size=10)),
    public_url=st.one_of(st.none(), st.text(max_size=30), st.just("https://h.example:8443")),
)
_request = st.builds(
    SignedRequest,
    method=st.sampled_from(["POST", "GET"]),
    url=_url,
    headers=_headers,
    body=st.one_of(st.binary(max_size=200), st.text(max_size=100).map(str.encode)),
    form=st.dictionaries(
        st.text(max_size=8), st.lists(st.text(max_size=8), max_size=3), max_size=4
    ),
)
_parsed = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["type", "challenge", "x"]),
        st.one_of(st.text(max_size=10), st.just("url_verification"), st.integers()),
    ),
)
_now = st.one_of(st.just(float(NOW)), st.floats(allow_nan=True, allow_infinity=True))


@pytest.mark.parametrize("name", sorted(SCHEMES))
@settings(deadline=None, database=None)
@given(request_=_request, config=_cfg, now=_now, parsed=_parsed)
def test_fuzz_only_signature_error_escapes(
    name: str, request_: SignedRequest, config: SchemeConfig, now: float, parsed: object
) -> None:
    scheme = SCHEMES[name]
    try:
        result = scheme.verify(request_, config, now)
    except SignatureError:
        pass
    else:
        assert isinstance(result, Verified)
    try:
        got = scheme.get_challenge(request_, config)
    except SignatureError:
        pass
    else:
        assert got is None or isinstance(got[1], (dict, str))
    answer = scheme.challenge(request_, parsed)
    assert answer is None or 200 <= answer[0] <= 299
