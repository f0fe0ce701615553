"""Log lines with fields: the explanation kept, trace ids while a trace is active, and a
line for every failed attempt, at the level its outcome deserves."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from inbox.domain.playbooks import Playbook, Registry, StepContext
from inbox.infra import tracing
from inbox.infra.keyring import KeyMissing, SecretsLocked
from inbox.infra.logs import REDACTED, Explanation, configure_logging
from inbox.services.runner import RunConfig, run_claimed
from inbox.testing import InMemoryStore

CFG = RunConfig(lease_seconds=60.0, retry_base_seconds=2.0, retry_cap_seconds=3600.0)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    # The CLI keeps the keyring's line to itself (inbox.cli.base.main): a CLI test that ran
    # earlier in this process must not hide it here.
    keyring_log = logging.getLogger("inbox.infra.keyring")
    propagate, keyring_log.propagate = keyring_log.propagate, True
    stream = io.StringIO()
    configure_logging("DEBUG", stream=stream)
    try:
        yield stream
    finally:
        keyring_log.propagate = propagate
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
                h.close()
        root.setLevel(level)


def parsed(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_the_keyrings_explanation_is_logged_not_redacted(lines, monkeypatch):
    monkeypatch.setattr(SecretsLocked, "_logged_at", 0.0)
    KeyMissing()
    (line,) = [x for x in parsed(lines) if x["logger"] == "inbox.infra.keyring"]
    assert line["level"] == "ERROR"
    assert "INBOX_KEK is not set" in line["message"]
    assert "inbox secrets keygen" in line["message"]
    assert REDACTED not in line["message"]
    assert line["error_class"] == "KeyMissing" and line["setting"] == "INBOX_KEK"


def test_an_explanation_keeps_its_words_but_not_a_credential_inside_it(lines):
    log = logging.getLogger("tests.fields")
    log.warning("signing secret: %s", Explanation(f"the key {SECRET} is not valid base64"))
    log.warning("signing secret: %s", "plain-value-after-a-sensitive-word")
    first, second = parsed(lines)
    assert "is not valid base64" in first["message"] and SECRET not in first["message"]
    assert second["message"] == f"signing secret: {REDACTED}"


def test_a_line_inside_a_span_carries_its_trace_and_span_ids(lines):
    provider = TracerProvider()
    tracing.install(provider)
    try:
        with tracing.span("inbox.step") as current:
            logging.getLogger("tests.fields").info("inside")
        logging.getLogger("tests.fields").info("outside")
    finally:
        tracing.install(None)
    inside, outside = parsed(lines)
    ctx = current.get_span_context()
    assert inside["trace_id"] == f"{ctx.trace_id:032x}"  # not mistaken for a digest
    assert inside["span_id"] == f"{ctx.span_id:016x}"
    assert "trace_id" not in outside and "span_id" not in outside


def _failing() -> Playbook:
    pb = Playbook("fails")

    @pb.step("charge")
    def charge(ctx: StepContext) -> dict[str, Any]:
        raise RuntimeError(f"card declined, token={SECRET}")

    return pb


def test_every_failed_attempt_is_a_line_with_fields_a_warning_then_an_error(lines):
    store = InMemoryStore()
    store.add_event(max_attempts=2, tenant="acme", source="orders", public_id="evt_0001")
    reg = Registry()
    reg.register(_failing())
    for _ in range(2):
        with store.begin() as tx:
            (claim,) = store.claim(tx, "worker-1", 10, 60.0)
        run_claimed(store, claim, CFG, reg)
        store.now += 3600  # the retry is due
    failed = [x for x in parsed(lines) if x["logger"] == "inbox.services.runner"]
    assert [(x["level"], x["attempt"], x["outcome"]) for x in failed] == [
        ("WARNING", 1, "received"),
        ("ERROR", 2, "quarantined"),
    ]
    for x in failed:
        assert x["event_id"] == "evt_0001" and x["tenant"] == "acme" and x["source"] == "orders"
        assert x["step"] == "charge" and x["error_class"] == "RuntimeError"
        assert "card declined" in x["message"]  # the excerpt, redacted
        assert SECRET not in json.dumps(x)
