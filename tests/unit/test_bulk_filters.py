"""A bulk replay's filter names the items without an event type as ``untyped: "true"``."""

from __future__ import annotations

import pytest

from inbox.domain.errors import BadRequest
from inbox.services.bulk import parse_request


def test_untyped_selects_the_items_without_a_type():
    req = parse_request({"kind": "events", "filter": {"tenant": "acme", "untyped": "true"}})
    assert req.match.untyped and req.match.event_type is None
    assert req.stored_filter["untyped"] == "true"
    assert not parse_request({"kind": "events", "filter": {"type": "a"}}).match.untyped


@pytest.mark.parametrize("raw", [{"untyped": "yes"}, {"untyped": "true", "type": "invoice.paid"}])
def test_untyped_is_true_and_never_with_a_type(raw):
    with pytest.raises(BadRequest, match="untyped"):
        parse_request({"kind": "events", "filter": raw})
