"""The per-endpoint circuit breaker against a real local sink, through the courier's plain
function: an outage costs one probe at a time, not one attempt per message; no message's
attempt budget is spent while the circuit is open; the first success drains the backlog,
each webhook-id delivered once, in the order the deliveries were made.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from inbox.domain import callbacks
from inbox.domain.callbacks import CallbackSet, Outgoing
from inbox.domain.circuit import Policy
from inbox.services.courier import deliver_once
from inbox.store.write import deliveries as dstore
from inbox.store.write import endpoints as estore
from inbox.store.write import intents
from tests.helpers import wait_for
from tests.sink import Answer

FAST = Policy(failures=5, probe_min=0.3, probe_max=0.6)


@pytest.fixture
def tenant(make_source):
    return make_source()


def endpoint(engine, tenant, url: str, **opts):
    with engine.begin() as conn:
        return estore.create_endpoint(conn, tenant.tenant, url, callbacks.new_secret(), **opts)


def enqueue(engine, tenant, count: int) -> list[str]:
    """``count`` callbacks of one step, as a playbook makes them; their webhook-ids in order."""
    now = datetime.now(UTC)
    messages = [Outgoing("order.paid", {"n": i}, now) for i in range(count)]
    with engine.begin() as conn:
        intents.enqueue(
            conn,
            [
                CallbackSet(
                    tenant.tenant_id,
                    tenant.tenant,
                    None,
                    f"evt_{secrets.token_hex(6)}",
                    "s",
                    messages,
                )
            ],
        )
        return list(conn.execute(text("SELECT public_id FROM deliveries ORDER BY id")).scalars())


def row(engine, sql: str, **params):
    with engine.connect() as conn:
        return conn.execute(text(sql), params).one()


def test_an_outage_costs_probes_not_attempts_and_recovery_drains_in_order(engine, sink, tenant):
    url = sink.script("/o", Answer(503))
    ep = endpoint(engine, tenant, url, max_attempts=2)  # the default schedule: 5, 30, 120 s
    ids = enqueue(engine, tenant, 30)

    def courier() -> None:
        deliver_once(engine, ep.id, allow_private=True, policy=FAST)

    courier()
    assert len(sink.at("/o")) == 5  # the fifth failure opened it: the rest went back
    circuit = row(engine, "SELECT circuit, circuit_failures FROM endpoints WHERE id = :e", e=ep.id)
    assert tuple(circuit) == ("open", 5)
    # Couriers keep being rung (by the sweep, by new callbacks); probes go one at a time.
    wait_for(lambda: (courier(), len(sink.at("/o")) >= 5 + 6)[1], 30, "six probes")
    got = sink.at("/o")
    probes = got[5:]
    assert {r.headers["webhook-id"] for r in probes} == {ids[0]}  # the oldest, each time
    gaps = [b.at - a.at for a, b in itertools.pairwise(probes)]
    assert all(g >= FAST.probe_min * 0.8 * 0.9 for g in gaps), gaps
    spent = row(
        engine,
        "SELECT sum(attempts), count(*) FILTER (WHERE state = 'failed') FROM deliveries",
    )
    assert tuple(spent) == (5, 0)  # six probes beyond max_attempts=2: no budget spent
    assert len(got) - 5 == 6  # nothing but probes while open

    sink.script("/o", Answer(200))  # the endpoint is back
    wait_for(
        lambda: (
            courier(),
            row(engine, "SELECT count(*) FROM deliveries WHERE state = 'delivered'")[0] == 30,
        )[1],
        30,
        "the backlog drained",
    )
    ok = [r.headers["webhook-id"] for r in sink.at("/o")[len(got) :]]
    assert ok == ids  # each once, in the order made; the retries' 120 s waits were not kept
    assert tuple(row(engine, "SELECT circuit, circuit_failures FROM endpoints")) == ("closed", 0)


def test_retry_after_on_a_503_holds_the_whole_endpoint(engine, sink, tenant):
    url = sink.script("/ra", Answer(503, {"Retry-After": "1"}), Answer(200))
    ep = endpoint(engine, tenant, url)
    enqueue(engine, tenant, 3)
    first = deliver_once(engine, ep.id, allow_private=True)
    assert (first.opened, first.released) == (1, 2)  # it asked us to wait: nothing else went
    assert deliver_once(engine, ep.id, allow_private=True).claimed == 0  # not before 1 s
    wait_for(lambda: deliver_once(engine, ep.id, allow_private=True).closed == 1, 10, "the probe")
    got = sink.at("/ra")
    assert got[1].at - got[0].at >= 1.0


def test_one_probe_at_a_time_across_couriers(engine, sink, tenant):
    ep = endpoint(engine, tenant, sink.script("/p"))
    enqueue(engine, tenant, 3)
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE endpoints SET circuit = 'open', circuit_failures = 5,"
                " probe_at = now() - interval '1 second' WHERE id = :e"
            ),
            {"e": ep.id},
        )
    with engine.begin() as conn:
        [probe] = dstore.claim(conn, ep.id, "courier-a", 50, 30)
    assert probe.probe and probe.attempts == 0  # its budget is not spent
    with engine.begin() as conn:
        assert dstore.claim(conn, ep.id, "courier-b", 50, 30) == []  # half open: one probe
    circuit = row(engine, "SELECT circuit, probe_at > now() AS later FROM endpoints")
    assert tuple(circuit) == ("half_open", True)


def test_a_rate_limit_holds_across_couriers_and_nothing_is_dropped(engine, sink, tenant):
    ep = endpoint(engine, tenant, sink.script("/rate"), max_in_flight=4)
    with engine.begin() as conn:
        conn.execute(text("UPDATE endpoints SET rate_per_second = 10 WHERE id = :e"), {"e": ep.id})
    ids = enqueue(engine, tenant, 25)

    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def courier() -> None:
        def drained() -> bool:
            deliver_once(engine, ep.id, allow_private=True)
            left = row(engine, "SELECT count(*) FROM deliveries WHERE state <> 'delivered'")[0]
            return left == 0

        try:
            barrier.wait(10)  # released together
            wait_for(drained, 30, "the backlog")
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=courier) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    got = sink.at("/rate")
    assert sorted(r.headers["webhook-id"] for r in got) == sorted(ids)  # each once
    # Never faster than the bucket allows (10 a second, a second's burst), whatever the
    # number of couriers; the slack is one claim's worth sent after the next was taken.
    for i, j in itertools.combinations(range(len(got)), 2):
        assert j - i + 1 <= 2 * 10 + 10 * (got[j].at - got[i].at), (i, j)


def test_a_failure_rate_opens_it_though_failures_never_come_n_in_a_row(engine, sink, tenant):
    from inbox.infra.config import Settings
    from inbox.services.courier import policy_of

    # The settings' policy: INBOX_CIRCUIT_FAILURE_RATE=0.5 over 60 s, 20 attempts at least;
    # three consecutive failures would open it too, but the sink never fails twice in a row.
    policy = policy_of(Settings(database_url="postgresql://unused/x"))
    assert (policy.failures, policy.failure_rate, policy.min_attempts) == (3, 0.5, 20)
    url = sink.script("/alt", *[Answer(503), Answer(200)] * 40)
    ep = endpoint(engine, tenant, url, max_attempts=10, retry_schedule=[0])
    enqueue(engine, tenant, 10)

    first = deliver_once(engine, ep.id, allow_private=True, policy=policy)
    assert (first.claimed, first.delivered, first.retried, first.opened) == (10, 5, 5, 0)
    kept = row(
        engine,
        "SELECT circuit, circuit_failures, circuit_window FROM endpoints WHERE id = :e",
        e=ep.id,
    )
    assert (kept.circuit, kept.circuit_failures) == ("closed", 0)
    counts = [sum(s[i] for s in kept.circuit_window["slices"]) for i in (0, 1)]
    assert counts == [10, 5]  # the window is on the endpoint's row, for every courier

    enqueue(engine, tenant, 30)
    wait_for(
        lambda: (
            deliver_once(engine, ep.id, allow_private=True, policy=policy).opened == 1
            or row(engine, "SELECT circuit FROM endpoints WHERE id = :e", e=ep.id)[0] != "closed"
        ),
        30,
        "the circuit to open",
    )
    got = [r for r in sink.at("/alt")]
    statuses = ["fail" if i % 2 == 0 else "ok" for i in range(len(got))]
    assert "fail,fail" not in ",".join(statuses)  # never two failures in a row
    assert len(got) == 21  # opened by the 21st attempt: 11 of 21 failed, 20 at least
    opened = row(engine, "SELECT circuit, circuit_window FROM endpoints WHERE id = :e", e=ep.id)
    assert (opened.circuit, opened.circuit_window) == ("open", {})
    assert deliver_once(engine, ep.id, allow_private=True, policy=policy).claimed == 0
    assert len(sink.at("/alt")) == 21  # nothing more until its probe is due


def test_a_slow_endpoints_round_hands_back_what_could_outlive_its_lease(engine, sink, tenant):
    # Each answer takes 0.4 s of a 1 s timeout; the lease is 3 s. An attempt may start only
    # while it would end (at the timeout) with a second of the lease to spare: 1 s in.
    url = sink.script("/slow", Answer(200, delay=0.4))
    ep = endpoint(engine, tenant, url, timeout_ms=1000)
    ids = enqueue(engine, tenant, 8)
    got = deliver_once(engine, ep.id, allow_private=True, lease_seconds=3)
    arrived = sink.at("/slow")
    assert got.delivered == len(arrived) and got.released == 8 - len(arrived) >= 1
    assert arrived[-1].at - arrived[0].at <= 1.0 + 0.3
    assert got.retry_in == [0.0]  # rung again at once: nothing waits for the sweep
    with engine.connect() as conn:
        back = conn.execute(
            text("SELECT count(*) FROM deliveries WHERE state = 'pending' AND attempts = 0")
        ).scalar_one()
    assert back == got.released  # handed back unattempted, their budget unspent
    wait_for(
        lambda: (
            deliver_once(engine, ep.id, allow_private=True, lease_seconds=3),
            row(engine, "SELECT count(*) FROM deliveries WHERE state = 'delivered'")[0] == 8,
        )[1],
        60,
        "every delivery",
    )
    assert sorted(r.headers["webhook-id"] for r in sink.at("/slow")) == sorted(ids)  # once each
