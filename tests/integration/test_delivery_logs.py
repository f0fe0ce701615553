"""Every failed delivery attempt is a log line with its fields: a warning while it will be
retried, an error when it becomes a dead letter; never the endpoint's secret or the body."""

from __future__ import annotations

import json
import logging

from inbox.domain import callbacks
from inbox.infra.config import Settings
from inbox.services.courier import deliver_once
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.write import endpoints as estore
from tests.helpers import body_of, hmac_headers
from tests.sink import Answer

LEAK = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"


def test_failed_delivery_attempts_are_logged_warning_then_error(
    client, engine, settings, sink, make_source, caplog
):
    src = make_source(playbook="forward", event_type_path="type")
    secret = callbacks.new_secret()
    answer = Answer(500, body=json.dumps({"error": "down", "api_key": LEAK}).encode())
    with engine.begin() as conn:
        ep = estore.create_endpoint(
            conn, src.tenant, sink.script("/cb", answer), secret, retry_schedule=[0], max_attempts=2
        )
    body = body_of({"type": "fraud.alert", "account": "acct-1"})
    assert (
        client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k")).status_code
        == 202
    )
    drain_once(Runtime(Settings(database_url=settings.database_url), engine))
    with caplog.at_level(logging.INFO, logger="inbox.services.courier"):
        for _ in range(2):
            deliver_once(engine, ep.id, allow_private=True)
    lines = [r for r in caplog.records if r.name == "inbox.services.courier"]
    assert [(r.levelname, r.attempt, r.outcome) for r in lines] == [
        ("WARNING", 1, "retry"),
        ("ERROR", 2, "failed"),
    ]
    (delivery,) = {r.delivery_id for r in lines}
    assert delivery.startswith("msg_")
    for r in lines:
        assert r.tenant == src.tenant and r.endpoint == ep.public_id
        assert r.status == 500 and r.error_class == "HTTP 500"
        assert "down" in r.excerpt and LEAK not in r.excerpt
        assert delivery in r.getMessage()
        text = json.dumps({k: str(v) for k, v in vars(r).items()})
        assert secret not in text and secret.removeprefix("whsec_") not in text
