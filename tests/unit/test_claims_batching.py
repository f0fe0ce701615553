"""Group commit in ``Claims``: who shares a statement, and what each claimant hears.

The statements go to the in-memory store's ``insert``; a gate holds the first one "out" so the
next claimants queue behind it, as they do behind a round trip to PostgreSQL.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from inbox.domain.intake import Prepared
from inbox.domain.records import Source, SourceId, TenantId
from inbox.domain.sources import SourceOptions
from inbox.store.db.claims import Copy
from inbox.store.db.group_commit import Claims
from tests.helpers import wait_for
from tests.unit.fake_store import InMemoryStore

SOURCE = Source(
    id=SourceId(3),
    tenant_id=TenantId(1),
    tenant="acme",
    name="orders",
    scheme="hmac",
    enabled=True,
    options=SourceOptions(),
    secrets=("s",),
)


def prepared(public_id: str, key: bytes | None = None) -> Prepared:
    return Prepared(
        public_id=public_id,
        key_digest=key,
        key_expires_hours=24,
        event_type="order.paid",
        business_key_digest=None,
        content_type="application/json",
        body=b"{}",
        body_sha256=b"\0" * 32,
        headers={},
        response_status=202,
        response_body=b"{}",
        wait_seconds=None,
    )


class Harness:
    """Claims over the in-memory store, with the first statement held until ``release``."""

    def __init__(self, max_rows: int = 64) -> None:
        self.store = InMemoryStore()
        self.gate = threading.Event()
        self.claims = Claims(None, max_rows, send=self._send)
        self.results: dict[str, Any] = {}
        self.threads: list[threading.Thread] = []

    def _send(self, rows: list[tuple[Any, ...]]) -> dict[str, int]:
        if not self.store.statements:  # the first statement waits at the gate
            self.store.statements.append([])
            assert self.gate.wait(30)
            self.store.statements.pop(0)
        return self.store.insert(rows)

    def start(self, public_id: str, key: bytes | None = None) -> None:
        def run() -> None:
            try:
                self.results[public_id] = self.claims.claim(SOURCE, prepared(public_id, key))
            except BaseException as exc:
                self.results[public_id] = exc

        queued = self.claims.pending()
        thread = threading.Thread(target=run)
        thread.start()
        self.threads.append(thread)
        if not self.threads[1:]:  # the first claimant: its statement is out, at the gate
            wait_for(lambda: self.store.statements == [[]])
        else:  # later ones queue, in the order started
            wait_for(lambda: self.claims.pending() == queued + 1)

    def finish(self) -> None:
        self.gate.set()
        for thread in self.threads:
            thread.join(30)
            assert not thread.is_alive()


def test_a_lone_claim_goes_at_once_in_a_statement_of_its_own() -> None:
    store = InMemoryStore()
    claims = Claims(None, send=store.insert)
    event_id = claims.claim(SOURCE, prepared("evt_a", b"k1"))
    assert event_id is not None
    assert store.statements == [["evt_a"]]
    assert claims.claim(SOURCE, prepared("evt_b", b"k1")) is None  # the key is taken


def test_everyone_queued_behind_a_statement_shares_the_next_one() -> None:
    h = Harness()
    for public_id in ("evt_a", "evt_b", "evt_c", "evt_d"):
        h.start(public_id, public_id.encode())
    h.finish()
    assert h.store.statements == [["evt_a"], ["evt_b", "evt_c", "evt_d"]]
    assert h.claims.statements == 2
    ids = [h.results[p] for p in ("evt_a", "evt_b", "evt_c", "evt_d")]
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == 4
    for public_id, event_id in h.results.items():
        assert h.store.event(event_id).public_id == public_id  # each hears its own row


def test_a_statement_carries_at_most_max_rows() -> None:
    h = Harness(max_rows=2)
    for public_id in ("evt_a", "evt_b", "evt_c", "evt_d"):
        h.start(public_id)
    h.finish()
    assert h.store.statements == [["evt_a"], ["evt_b", "evt_c"], ["evt_d"]]


def test_two_copies_of_one_key_never_share_a_statement() -> None:
    h = Harness()
    h.start("evt_a")
    h.start("evt_b", b"same")
    h.start("evt_c", b"same")
    h.start("evt_d", b"other")
    h.finish()
    assert h.store.statements == [["evt_a"], ["evt_b", "evt_d"], ["evt_c"]]
    assert isinstance(h.results["evt_b"], int)
    assert h.results["evt_c"] is None  # the second copy: its key is taken


def test_a_refused_row_fails_only_its_own_claim() -> None:
    h = Harness()
    h.store.refuse.add("evt_c")
    for public_id in ("evt_a", "evt_b", "evt_c", "evt_d"):
        h.start(public_id)
    h.finish()
    assert h.store.statements[:2] == [["evt_a"], ["evt_b", "evt_c", "evt_d"]]
    assert sorted(h.store.statements[2:]) == [["evt_b"], ["evt_c"], ["evt_d"]]
    assert isinstance(h.results["evt_c"], psycopg.DataError)
    assert isinstance(h.results["evt_b"], int) and isinstance(h.results["evt_d"], int)


def test_an_outage_reaches_every_claimant_as_an_error_of_its_own() -> None:
    h = Harness()
    h.store.down = psycopg.OperationalError("the database is gone")
    for public_id in ("evt_a", "evt_b", "evt_c"):
        h.start(public_id)
    h.finish()
    errors = [h.results[p] for p in ("evt_a", "evt_b", "evt_c")]
    assert all(isinstance(e, psycopg.OperationalError) for e in errors)
    assert len({id(e) for e in errors}) == 3  # no shared traceback between threads
    assert h.store.data.events == {}


def test_claims_needs_a_way_to_send() -> None:
    with pytest.raises(ValueError):
        Claims(None)


def test_the_committed_claims_are_counted_once_per_statement_before_anyone_hears() -> None:
    """Accepted claims and copies, by (outcome, tenant, source), one call per statement,
    made before any claimant of it returns; a key taken otherwise is not counted here
    (the web counts what its duplicate path decides)."""
    h = Harness()
    calls: list[dict[tuple[str, str, str], int]] = []
    returned_before: list[set[str]] = []

    def counted(counts: dict[tuple[str, str, str], int]) -> None:
        returned_before.append(set(h.results))
        calls.append(dict(counts))

    h.claims._counted = counted
    h.start("evt_a", b"k1")  # the first statement, held at the gate
    for public_id, key in (("evt_b", b"k2"), ("evt_c", None), ("evt_d", b"k3")):
        h.start(public_id, key)
    h.finish()
    assert calls == [{("accepted", "acme", "orders"): 1}, {("accepted", "acme", "orders"): 3}]
    # each statement's count came before any of its claimants returned
    assert returned_before[0] == set()
    assert not returned_before[1] & {"evt_b", "evt_c", "evt_d"}
    copy = Claims(None, send=lambda rows: {rows[0][0]: Copy(7, "evt_a", 202, b"{}")})
    copy._counted = counted
    assert isinstance(copy.claim(SOURCE, prepared("evt_e", b"k1")), Copy)
    taken = Claims(None, send=lambda rows: {})
    taken._counted = counted
    assert taken.claim(SOURCE, prepared("evt_f", b"k1")) is None
    assert calls[2:] == [{("duplicate", "acme", "orders"): 1}, {}]


def test_a_failing_count_fails_no_claim() -> None:
    def broken(counts: dict[tuple[str, str, str], int]) -> None:
        raise OSError("metrics directory gone")

    store = InMemoryStore()
    claims = Claims(None, send=store.insert, counted=broken)
    assert claims.claim(SOURCE, prepared("evt_a", b"k1")) is not None
