"""JSON log lines, and that no secret, signature, idempotency key or body reaches them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from inbox.infra.logs import REDACTED, JsonFormatter, configure_logging, redact, redact_text
from tests.helpers import body_of, hmac_headers

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
HMAC_SECRET = "tenant-hmac-secret-123"
KEY = "swap-42-alice@example.com"
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
BODY = body_of({"account": "acct-42", "card": "4111111111111111"})
SIGNATURE = hmac_headers(HMAC_SECRET, BODY, KEY, ts=1700000000)["X-Signature"]
STRIPE_SIG = f"t=1700000000,v1={SIGNATURE}"
FORBIDDEN = [
    SECRET,
    SECRET[6:],
    HMAC_SECRET,
    KEY,
    SIGNATURE,
    BEARER.split()[1],
    "acct-42",
    "4111111111111111",
]


class Captured:
    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    def lines(self) -> list[dict]:
        out = [json.loads(line) for line in self.stream.getvalue().splitlines()]
        assert out, "nothing was logged"
        return out

    def raw(self) -> str:
        return self.stream.getvalue()

    def assert_clean(self) -> None:
        text = self.raw()
        leaked = [f for f in FORBIDDEN if f in text]
        assert not leaked, f"leaked {leaked} in {text}"


@pytest.fixture
def captured() -> Iterator[Captured]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging("DEBUG", stream=stream)
    try:
        yield Captured(stream)
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
                h.close()
        root.setLevel(level)


log = logging.getLogger("tests.logs")


def test_one_json_object_per_line_with_the_standard_fields_and_extras(captured):
    log.info("ingest %s/%s outcome=%s", "acme", "billing", "accepted", extra={"attempt": 3})
    log.warning("second line")
    first, second = captured.lines()
    assert first["message"] == "ingest acme/billing outcome=accepted"
    assert first["level"] == "INFO" and first["logger"] == "tests.logs"
    assert first["ts"].endswith("+00:00") and "T" in first["ts"]
    assert first["attempt"] == 3
    assert second["message"] == "second line" and second["level"] == "WARNING"


def test_extra_fields_never_carry_secrets_signatures_keys_or_bodies(captured):
    headers = hmac_headers(HMAC_SECRET, BODY, KEY, ts=1700000000)
    headers.update({"Authorization": BEARER, "Stripe-Signature": STRIPE_SIG, "Cookie": "s=1"})
    log.info(
        "x",
        extra={
            "headers": headers,
            "secret": SECRET,
            "idempotency_key": KEY,
            "body": BODY,
            "payload": {"account": "acct-42"},
            "source_options": {"redact_paths": ["card"], "raw_body": BODY.decode()},
            "note": f"rotated to {SECRET} by {BEARER}",
            "tenant": "acme",
        },
    )
    [line] = captured.lines()
    captured.assert_clean()
    assert line["tenant"] == "acme"  # what is not secret stays readable
    assert line["headers"]["Content-Type"] == "application/json"
    assert line["headers"]["X-Timestamp"] == "1700000000"
    for name in ("X-Signature", "Idempotency-Key", "Authorization", "Stripe-Signature", "Cookie"):
        assert line["headers"][name] == REDACTED
    assert line["secret"] == line["idempotency_key"] == line["body"] == REDACTED
    assert line["payload"] == REDACTED
    assert line["note"] == f"rotated to {REDACTED} by {REDACTED}"


@pytest.mark.parametrize(
    ("msg", "args"),
    [
        ("idempotency key %s from %s", (KEY, "10.0.0.1")),
        ("Idempotency-Key: %s from %s", (KEY, "10.0.0.1")),
        ("key=%r from %s", (KEY, "10.0.0.1")),
        ("secret %s from %s", (HMAC_SECRET, "10.0.0.1")),
        ("signature mismatch: got %s from %s", (SIGNATURE, "10.0.0.1")),
        ("header %s from %s", (STRIPE_SIG, "10.0.0.1")),
        ("auth %s from %s", (BEARER, "10.0.0.1")),
        ("new secret %s from %s", (SECRET, "10.0.0.1")),
        ("headers %s from %s", ({"Idempotency-Key": KEY, "X-Signature": SIGNATURE}, "10.0.0.1")),
        ("body %s from %s", (BODY, "10.0.0.1")),
        ("payload %s from %s", ({"account": "acct-42", "card": "4111111111111111"}, "10.0.0.1")),
    ],
)
def test_percent_args_are_redacted(captured, msg, args):
    log.info(msg, *args)
    [line] = captured.lines()
    captured.assert_clean()
    assert line["message"].endswith("from 10.0.0.1")  # the harmless argument is kept
    assert REDACTED in line["message"]


def test_a_mapping_argument_is_redacted_by_key(captured):
    log.info(
        "%(tenant)s got %(token)s / %(idempotency_key)s",
        {"tenant": "acme", "token": HMAC_SECRET, "idempotency_key": KEY},
    )
    [line] = captured.lines()
    captured.assert_clean()
    assert line["message"] == f"acme got {REDACTED} / {REDACTED}"


def test_key_value_text_in_the_message_itself_is_redacted(captured):
    log.info(f"verify failed secret={HMAC_SECRET} idempotency_key={KEY}")
    [line] = captured.lines()
    captured.assert_clean()
    assert line["message"] == f"verify failed secret={REDACTED} idempotency_key={REDACTED}"


def test_tracebacks_are_redacted(captured):
    try:
        raise ValueError(f"bad signing secret {SECRET} / signature={SIGNATURE}")
    except ValueError:
        log.exception("verification crashed")
    [line] = captured.lines()
    captured.assert_clean()
    assert "ValueError" in line["exc"] and "Traceback" in line["exc"]


def test_a_broken_format_string_still_formats_and_still_redacts():
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "two %s %s", (KEY,), None)
    line = json.loads(JsonFormatter().format(record))
    assert line["message"].startswith("two %s %s")
    assert KEY not in json.dumps(line)


def test_configure_logging_twice_keeps_one_handler(captured):
    stream = io.StringIO()
    configure_logging("INFO", stream=stream)
    configure_logging("INFO", stream=stream)
    log.info("once")
    assert stream.getvalue().count('"once"') == 1
    assert captured.raw() == ""  # the earlier handler was replaced, not kept alongside


def test_redact_is_pure_and_walks_nested_structures():
    original = {
        "tenant": "acme",
        "headers": [("X-Hub-Signature-256", "sha256=" + SIGNATURE), ("Accept", "*/*")],
        "nested": {"api_key": "k", "list": [SECRET, "plain", {"cookie": "c"}]},
        "digest": "ab" * 32,
        "event": "evt_0123456789abcdef01234567",
        "raw": b"\x00\x01",
    }
    snapshot = repr(original)
    out = redact(original)
    assert repr(original) == snapshot  # the input is not modified
    assert out["tenant"] == "acme"
    assert out["headers"] == [("X-Hub-Signature-256", REDACTED), ("Accept", "*/*")]
    assert out["nested"] == {"api_key": REDACTED, "list": [REDACTED, "plain", {"cookie": REDACTED}]}
    assert out["digest"] == REDACTED
    assert out["event"] == "evt_0123456789abcdef01234567"  # our own ids stay readable
    assert out["raw"] == REDACTED


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.def-ghi", f"Authorization: {REDACTED}"),
        (f"t=1700000000,v1={SIGNATURE}", f"t=1700000000,{REDACTED}"),
        ("webhook-signature: v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=", None),
        ('{"password": "hunter2", "user": "bob"}', f'{{"password": "{REDACTED}", "user": "bob"}}'),
        ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", REDACTED),
        ("nothing to see in evt_0123456789abcdef01234567", None),
    ],
)
def test_redact_text_shapes(text, expected):
    out = redact_text(text)
    if expected is None and "evt_" in text:
        assert out == text
    elif expected is None:
        assert "K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN" not in out and REDACTED in out
    else:
        assert out == expected
