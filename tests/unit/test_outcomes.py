"""The outcome vocabularies are one set each: what the store records, the courier
counts and the metrics label are the members of ``inbox.domain.outcomes``."""

from __future__ import annotations

import json

from inbox.domain.outcomes import DeliveryOutcome, IngestOutcome, RunOutcome
from inbox.infra import metrics
from inbox.services.courier import _OUTCOME, CourierResult


def test_every_delivery_outcome_is_counted_and_labelled():
    result = CourierResult()
    # a blocked attempt is a failed delivery in the round's counts, its own label in metrics
    for outcome in {*_OUTCOME.values(), DeliveryOutcome.LOST}:
        assert getattr(result, outcome) == 0
    assert {*_OUTCOME.values(), DeliveryOutcome.LOST, DeliveryOutcome.BLOCKED} == set(
        DeliveryOutcome
    )
    assert metrics.DELIVERY_OUTCOMES == set(DeliveryOutcome)


def test_every_ingest_outcome_has_its_counter():
    assert set(metrics._INGEST) == set(IngestOutcome)


def test_outcomes_are_their_text_in_json_and_logs():
    assert json.dumps({"status": RunOutcome.DUPLICATE_FACT}) == '{"status": "duplicate_fact"}'
    assert f"{IngestOutcome.IN_FLIGHT}" == str(IngestOutcome.IN_FLIGHT) == "in_flight"
    assert RunOutcome.STALE == "stale"  # rows stored before the enum read back equal
