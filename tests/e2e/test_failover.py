"""Failover under load: a Patroni pair loses its primary four ways, and nothing is lost.

A private etcd and two PostgreSQL 15 nodes managed by Patroni (``synchronous_mode``), on
free ports in a temporary folder (tests/patroni.py). Every process (web, worker, courier,
beat, the CLI) is given both nodes in one DATABASE_URL, libpq's netloc form with
``target_session_attrs=read-write``. Under a steady signed load whose events run a
two-step playbook (each step an effect in a sink table outside the cluster) and send a
callback to an HTTP sink, the primary is lost four ways:

1. its postmaster is killed (kill -9);
2. the whole node is lost (Patroni and PostgreSQL killed together), then comes back;
3. ``patronictl switchover``;
4. etcd is taken away until Patroni demotes the primary, then brought back.

Then: every event answered 2xx is on the new primary; no effect ran under two step keys
and each event's callbacks carry one webhook-id; no answer was a 500 (only 2xx, and 503
with Retry-After); no process died; ingest answered 2xx within 2 s of the new primary
accepting writes (a probe writes to each node every 20 ms); leases taken on the old
primary commit nothing on the new one once lapsed; workers and couriers logged one
warning per outage and process, never a traceback. The windows are written to
``.data/failover-windows.json`` and printed (``pytest -s``).
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from inbox.domain.errors import LeaseLost
from inbox.domain.records import Claim
from inbox.infra.config import Settings
from inbox.store.db.engine import make_engine
from inbox.store.schema import migrate
from inbox.store.write import queue
from tests import patroni
from tests.brokers import PrivateRedis
from tests.helpers import body_of, hmac_headers, wait_for
from tests.procs import ROOT, CeleryProc, Web
from tests.sink import Sink
from tests.sink_playbooks import SINK_DDL

pytestmark = pytest.mark.e2e

TENANT, SOURCE, SECRET = "acme", "pay", "s3cret"
METRICS_TOKEN = "scrape-" + "f" * 24
SENDERS = 2
SEND_EVERY = 0.1  # seconds between one sender's requests
BACK_WITHIN = 2.0  # ingest's first 2xx after the new primary takes writes
OPEN_EVENTS = text("SELECT count(*) FROM events WHERE state <> 'completed'")
UNDELIVERED = text("SELECT count(*) FROM deliveries WHERE state <> 'delivered'")


@dataclass
class Answer:
    key: str
    started: float
    ended: float
    status: int  # 0: no HTTP answer at all
    retry_after: str | None = None
    public_id: str | None = None


@dataclass
class Load:
    """Signed events, one unique key each, from a few threads; every answer kept."""

    web: Web
    answers: list[Answer] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _n: Iterator[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def send_one(self, key: str | None = None) -> Answer:
        """One signed event: a new key, or ``key`` again (a provider's retry)."""
        if key is None:
            with self._lock:
                key = f"ev-{next(self._n)}"
        body = body_of({"type": "charge.tell", "id": key})
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", self.web.port, timeout=30)
        try:
            conn.request("POST", f"/hooks/{TENANT}/{SOURCE}", body, hmac_headers(SECRET, body, key))
            resp = conn.getresponse()
            raw = resp.read()
            answer = Answer(
                key, started, time.monotonic(), resp.status, resp.getheader("retry-after")
            )
            if 200 <= resp.status < 300:
                answer.public_id = json.loads(raw)["id"]
        except OSError:
            answer = Answer(key, started, time.monotonic(), 0)
        finally:
            conn.close()
        with self._lock:
            self.answers.append(answer)
        return answer

    def run(self) -> None:
        while not self.stop.is_set():
            self.send_one()
            self.stop.wait(SEND_EVERY)

    def accepted(self) -> dict[str, str]:
        with self._lock:
            return {a.key: a.public_id for a in self.answers if a.public_id}

    def retry_refused(self, seconds: float) -> None:
        """Send every key never answered 2xx again until it is, as its provider would: a
        503 may follow a commit whose acknowledgement was lost with the primary, and the
        retry then gets the stored answer of that one event."""
        with self._lock:
            refused = {a.key for a in self.answers} - {a.key for a in self.answers if a.public_id}
        for key in sorted(refused):
            wait_for(
                lambda k=key: self.send_one(k).public_id is not None, seconds, f"{key} 2xx", 0.2
            )


@dataclass
class Probe:
    """Each node's answer to a one-row INSERT, every 20 ms: when writes are taken where."""

    node: patroni.Node
    seen: list[tuple[float, bool]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        conn: psycopg.Connection | None = None
        dsn = self.node.dsn.rsplit("/", 1)[0] + "/probe"
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        dsn,
                        autocommit=True,
                        connect_timeout=1,
                        options="-c statement_timeout=1000",
                    )
                conn.execute("INSERT INTO probe DEFAULT VALUES")
                ok = True
            except psycopg.errors.ReadOnlySqlTransaction:
                ok = False  # a standby: the session stays, and writes once it is promoted
            except psycopg.Error:
                ok = False
                if conn is not None:
                    conn.close()
                conn = None
            self.seen.append((started, ok))
            self.stop.wait(0.02)
        if conn is not None:
            conn.close()


def cli(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "inbox.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.fixture
def pair() -> Iterator[patroni.Pair]:
    why = patroni.missing()
    if why:
        pytest.skip(f"no Patroni pair on this machine: {why}")
    cluster = patroni.Pair()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def effects_db(pg_server_url: str) -> Iterator[str]:
    """The playbook's outside system: a database of this test's own on the shared server,
    apart from the cluster, so an effect made there survives whatever the cluster loses."""
    name = f"inbox_effects_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = pg_server_url.partition("?")
    url = base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SINK_DDL)
    yield url
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def windows_of(
    name: str, fault_at: float, old: patroni.Node, probes: list[Probe], load: Load
) -> dict[str, float | int | str]:
    """The fault's windows: writes refused (by the probes), ingest's 503s, and how long
    after the new primary took its first write ingest answered 2xx again."""
    old_probe = next(p for p in probes if p.node is old)
    found: dict[str, float] = {}

    def measured() -> bool:
        lost = next((t for t, ok in list(old_probe.seen) if t >= fault_at and not ok), None)
        if lost is None:
            return False
        seen = [t for p in probes for t, ok in list(p.seen) if t > lost and ok]
        if not seen:
            return False
        writable = min(seen)
        back = [a.ended for a in list(load.answers) if a.status == 202 and a.ended >= writable]
        if not back:
            return False
        found.update(lost=lost, writable=writable, first_2xx=min(back))
        return True

    patroni.wait(measured, 60, f"{name}: writes and ingest back")
    answers = [a for a in list(load.answers) if a.started >= fault_at - 1]
    refused = [a for a in answers if a.status != 202]
    span = max(a.ended for a in refused) - min(a.started for a in refused) if refused else 0.0
    return {
        "fault": name,
        "writes_refused_s": round(found["writable"] - found["lost"], 3),
        "ingest_503s": len(refused),
        "ingest_503_window_s": round(span, 3),
        "first_2xx_after_writable_ms": round((found["first_2xx"] - found["writable"]) * 1000, 1),
    }


def wait_for_leader_change(pair: patroni.Pair, old: patroni.Node, timeout: float) -> patroni.Node:
    other = next(n for n in pair.nodes if n is not old)
    patroni.wait(lambda: patroni.writable(other), timeout, f"{other.name} to take writes")
    return other


def take_leases(url: str, load: Load, n: int = 3, lease_seconds: float = 3.0) -> list[Claim]:
    """Leases on due events, taken as a worker takes them (``queue.claim``), racing the
    real workers: a burst of events, then claims until some are ours."""
    engine = make_engine(Settings(database_url=url))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            burst = [threading.Thread(target=load.send_one) for _ in range(8)]
            for t in burst:
                t.start()
            until = time.monotonic() + 1
            while time.monotonic() < until:
                with engine.begin() as conn:
                    got = queue.claim(conn, "test-old-primary", n, lease_seconds)
                if got:
                    for t in burst:
                        t.join(30)
                    return got
            for t in burst:
                t.join(30)
        raise AssertionError("never won a claim against the workers")
    finally:
        engine.dispose()


def prepare(pair: patroni.Pair, env: dict[str, str], sink: Sink) -> None:
    """The inbox's database (migrated through the multi-host URL), the probes' database,
    and a tenant, a source and an endpoint made with the CLI."""
    leader = pair.leader()
    assert leader is not None
    with psycopg.connect(leader.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE inbox")
        conn.execute("CREATE DATABASE probe")
    with psycopg.connect(leader.dsn.rsplit("/", 1)[0] + "/probe", autocommit=True) as conn:
        conn.execute("CREATE TABLE probe (at timestamptz NOT NULL DEFAULT now())")
    migrate.upgrade(env["DATABASE_URL"])
    cli_env = {**os.environ, **env}
    cli(cli_env, "tenants", "create", TENANT)
    source = ["--tenant", TENANT, "--name", SOURCE, "--scheme", "hmac", "--secret", SECRET]
    cli(cli_env, "sources", "create", *source, "--option", 'event_type_path="type"')
    # The sink is on this machine and answers at once: a 2 s timeout is plenty. A courier's
    # round starts attempts only while one would still end inside its lease (INBOX_LEASE_
    # SECONDS, at least the timeout + 1 s); with the default 5 s timeout and this test's 5 s
    # lease a round sends one callback and rings again, and the steady load's callbacks
    # fell behind it (minutes of backlog drained after the faults).
    timeout = ["--timeout-ms", "2000"]
    cli(cli_env, "endpoints", "create", "--tenant", TENANT, "--url", sink.url("/told"), *timeout)


def on_primary(pair: patroni.Pair, load: Load, what: str) -> None:
    """Every event answered 2xx so far is on the node that takes writes now."""
    ids = list(load.accepted().values())
    current = pair.leader()
    assert current is not None, what
    with psycopg.connect(current.dsn.rsplit("/", 1)[0] + "/inbox") as conn:
        rows = conn.execute("SELECT public_id FROM events WHERE public_id = ANY(%s)", (ids,))
        found = {r[0] for r in rows}
    assert not set(ids) - found, f"{what}: 2xx'd events missing on the new primary"


def steady(load: Load, answers: int) -> None:
    """Until the load has had ``answers`` more 2xx answers from here on."""

    def accepted() -> int:
        return sum(1 for a in list(load.answers) if 200 <= a.status < 300)

    seen = accepted()
    wait_for(
        lambda: accepted() >= seen + answers,
        120,
        f"{answers} more accepted events",
    )


def run_faults(
    pair: patroni.Pair, url: str, web: Web, load: Load, probes: list[Probe]
) -> tuple[list[dict[str, float | int | str]], list[Claim]]:
    """The four faults, each on a healthy pair under load; their windows, and the leases
    the test took on the primary that was then lost."""
    windows: list[dict[str, float | int | str]] = []
    held: list[Claim] = []

    def fault(name: str, act: Callable[[patroni.Node], None]) -> None:
        old = pair.wait_healthy(180)
        steady(load, 20)  # a steady load on a healthy pair before each fault
        at = time.monotonic()
        act(old)
        windows.append(windows_of(name, at, old, probes, load))
        on_primary(pair, load, name)

    def kill_postmaster(old: patroni.Node) -> None:
        old.kill_postmaster()  # Patroni fails over to the synchronous standby
        wait_for_leader_change(pair, old, 90)

    def lose_node(old: patroni.Node) -> None:
        held.extend(take_leases(url, load))
        old.kill_node()
        wait_for_leader_change(pair, old, 90)
        old.start()  # the node comes back and rejoins as the standby (pg_rewind)

    def switchover(old: patroni.Node) -> None:
        other = next(n for n in pair.nodes if n is not old)
        pair.patronictl("switchover", "--leader", old.name, "--candidate", other.name, "--force")
        wait_for_leader_change(pair, old, 90)

    def etcd_away(old: patroni.Node) -> None:
        pair.etcd.kill()
        patroni.wait(lambda: pair.leader() is None, 60, "the primary to demote itself")
        # /readyz tells a load balancer why: once the demoted node runs as a standby, the
        # database is read-only.
        said: list[bytes] = []

        def read_only() -> bool:
            status, _, body = web.request("GET", "/readyz")
            said.append(body)
            doc = json.loads(body)
            return status == 503 and doc["checks"]["database"].startswith("read-only")

        patroni.wait(read_only, 30, f"/readyz to say read-only: {said[-1:]}")
        pair.etcd.start()
        patroni.wait(pair.etcd.healthy, 30, "etcd back")
        patroni.wait(lambda: pair.leader() is not None, 90, "a primary again")

    fault("postmaster killed", kill_postmaster)
    fault("primary node lost", lose_node)
    fault("patronictl switchover", switchover)
    fault("etcd away", etcd_away)
    pair.wait_healthy(180)
    status, _, body = web.request("GET", "/readyz")
    assert status == 200, body
    return windows, held


def check_settled_and_fenced(url: str, accepted: dict[str, str], held: list[Claim]) -> None:
    """Every event answered 2xx completes on the last primary with its callback delivered;
    leases taken on a lost primary commit nothing once lapsed."""
    final = make_engine(Settings(database_url=url))
    try:

        def settled() -> bool:
            with final.connect() as conn:
                return conn.execute(OPEN_EVENTS).scalar() == conn.execute(UNDELIVERED).scalar() == 0

        try:
            patroni.wait(settled, 180, "every event completed and every callback delivered")
        except AssertionError:
            with final.connect() as conn:  # what was left open, for whoever reads the failure
                for table in ("events", "deliveries"):
                    left = conn.execute(
                        text(f"SELECT state, attempts, count(*) FROM {table} GROUP BY 1, 2")
                    ).all()
                    print(f"{table} by state and attempts: {left}")
            raise
        with final.connect() as conn:
            stored = conn.execute(text("SELECT public_id FROM events")).scalars().all()
        assert set(stored) == set(accepted.values())

        assert held, "no lease was taken before the node was lost"
        for c in held:
            with pytest.raises(LeaseLost), final.begin() as conn:
                queue.record_steps(conn, c, {"forged": {"by": "old lease"}}, 60)
            with pytest.raises(LeaseLost), final.begin() as conn:
                queue.complete(conn, c, "completed", {"forged": True}, None, None)
            with pytest.raises(LeaseLost), final.begin() as conn:
                queue.fail(conn, c, RuntimeError("forged"), True, 0.0)
            with final.begin() as conn:
                assert queue.extend(conn, [c], 60) == 0
        with final.connect() as conn:
            forged = conn.execute(text("SELECT count(*) FROM steps WHERE name = 'forged'"))
            decisions = conn.execute(
                text("SELECT state, decision FROM events WHERE id = ANY(:ids)"),
                {"ids": [c.id for c in held]},
            ).all()
            assert forged.scalar() == 0
        assert [(d.state, d.decision) for d in decisions] == [("completed", {"told": True})] * len(
            held
        )
    finally:
        final.dispose()


def check_effects_once(effects_db: str, sink: Sink, accepted: dict[str, str]) -> None:
    """No effect ran under two step keys, every accepted event's two steps ran, and each
    event's callback carried one webhook-id however often it was sent."""
    by_step: dict[tuple[str, str], set[str]] = defaultdict(set)
    with psycopg.connect(effects_db) as conn:
        for event, step, step_key in conn.execute("SELECT event, step, step_key FROM test_sink"):
            by_step[(event, step)].add(step_key)
    doubled = {k: v for k, v in by_step.items() if len(v) > 1}
    assert not doubled
    assert set(by_step) == {(e, s) for e in accepted.values() for s in ("charge", "tell")}
    ids_per_event: dict[str, set[str]] = defaultdict(set)
    for r in sink.at("/told"):
        ids_per_event[json.loads(r.body)["data"]["id"]].add(r.headers["webhook-id"])
    assert set(ids_per_event) == set(accepted)
    assert all(len(ids) == 1 for ids in ids_per_event.values())


def check_logs(procs: list, web: Web, outages: int) -> int:
    """No process died or logged a traceback; each worker and courier process logged one
    WARNING per outage it met (then one INFO when it was over). The warnings' count."""
    warnings = 0
    for p in procs:
        assert p.popen.poll() is None, f"{p.name} exited:\n{p.output()[-3000:]}"
        out = p.output()
        assert "Traceback" not in out and "raised unexpected" not in out, out[-5000:]
        assert "exited with" not in out, out[-3000:]  # a pool process that died
        if p is web:
            continue
        per_pid: dict[int, list[str]] = defaultdict(list)
        for line in out.splitlines():
            doc = json.loads(line) if line.startswith("{") else {}
            if doc.get("logger") == "inbox.services.outages":
                per_pid[doc["pid"]].append(doc["level"])
        for pid, levels in per_pid.items():
            alternating = ["WARNING" if i % 2 == 0 else "INFO" for i in range(len(levels))]
            assert levels == alternating, (p.name, pid, levels)
            assert levels.count("WARNING") <= outages
            warnings += levels.count("WARNING")
    assert warnings >= 1, "no worker or courier met an outage"
    return warnings


def outages_counted(web: Web) -> float:
    """``inbox_database_outages_total`` summed over this host's processes."""
    auth = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    status, _, body = web.request("GET", "/metrics", headers=auth)
    assert status == 200
    return sum(
        s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if s.name == "inbox_database_outages_total"
    )


def test_failover_under_load_loses_nothing_and_doubles_nothing(
    pair: patroni.Pair, effects_db: str, private_redis: PrivateRedis, sink: Sink, procs,
    tmp_path,
):  # fmt: skip
    url = pair.url("inbox")  # both nodes, netloc form, target_session_attrs=read-write
    env = {
        "DATABASE_URL": url,
        "REDIS_URL": private_redis.url,
        "BROKER_URL": private_redis.url,
        "INBOX_TEST_SINK_URL": effects_db,  # the effects' outside system: not the cluster
        "INBOX_PLAYBOOKS": "tests.sink_playbooks",
        "INBOX_ALLOW_PRIVATE_TARGETS": "1",
        "INBOX_SWEEP_SECONDS": "1",
        "INBOX_LEASE_SECONDS": "5",
        "INBOX_BATCH_SIZE": "5",
        "INBOX_DB_POOL_SIZE": "5",
        "INBOX_METRICS_TOKEN": METRICS_TOKEN,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
    }
    prepare(pair, env, sink)
    celery = [
        CeleryProc(env, kind="worker", concurrency=2),
        CeleryProc(env, kind="courier", concurrency=4),
        CeleryProc(env, kind="beat"),
    ]
    procs.extend(celery)
    web = Web(env, workers=1)
    procs.append(web)
    patroni.wait(lambda: all(" ready." in p.output() for p in celery[:2]), 90, "celery ready")

    load = Load(web)
    probes = [Probe(n) for n in pair.nodes]
    threads = [threading.Thread(target=p.run, daemon=True) for p in probes]
    threads += [threading.Thread(target=load.run, daemon=True) for _ in range(SENDERS)]
    for t in threads:
        t.start()
    try:
        windows, held = run_faults(pair, url, web, load, probes)
        steady(load, 20)  # the load goes on for a moment on the healthy pair
    finally:
        load.stop.set()
        for p in probes:
            p.stop.set()
        for t in threads:
            t.join(60)
    report = {"command": "pytest -s tests/e2e/test_failover.py", "windows": windows}
    (ROOT / ".data" / "failover-windows.json").write_text(json.dumps(report, indent=1))
    print("\nfailover windows:", json.dumps(windows, indent=1))

    # Only 2xx and quick 503s with Retry-After: never a 500, never no answer.
    statuses = Counter(a.status for a in load.answers)
    assert set(statuses) <= {202, 503}, statuses
    assert all(a.retry_after for a in load.answers if a.status == 503)
    assert statuses[202] > 100 and statuses[503] > 0, statuses
    late = [w for w in windows if float(w["first_2xx_after_writable_ms"]) > BACK_WITHIN * 1000]
    assert not late, windows

    load.retry_refused(120)
    accepted = load.accepted()
    on_primary(pair, load, "the end")
    check_settled_and_fenced(url, accepted, held)
    check_effects_once(effects_db, sink, accepted)
    warnings = check_logs(procs, web, len(windows))
    assert outages_counted(web) == warnings  # the counter counted each of those warnings
