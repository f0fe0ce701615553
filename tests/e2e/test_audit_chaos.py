"""No false alarms: the suite's chaos, all in one healthy run, leaves the self-audit nothing.

Every process (web, worker, courier, beat) reaches a PostgreSQL cluster of the test's own
through a PgBouncer in transaction mode (``dev.pgbouncer``), and Redis through Sentinel
(``tests.sentinels``: the doorbell, the broker and the beat lease). Under signed load with
callbacks to a sink, the chaos kinds the suite already has, each through its own helper:
a worker SIGKILLed mid-step (its effect made, its commit not: the lease expires and the
sweep reclaims it), the database restarted (``PrivatePostgres.restart``), the Redis master
lost (``SentinelStack.kill_master``). Once every accepted event is done and every
callback delivered, ``inbox audit --json`` finds nothing, and beat's passes during the
chaos opened nothing either.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Engine, text

import tests.sink_playbooks as sp
from dev import pgbouncer as pb
from dev.embedded import PrivatePostgres
from inbox.domain import callbacks
from inbox.domain.sources import SourceOptions
from inbox.infra.config import Settings
from inbox.store.db.engine import make_engine
from inbox.store.schema import migrate
from inbox.store.write import endpoints as estore
from inbox.store.write import sources as sstore
from tests.e2e.test_audit_processes import beat_audited, full_audit, violated
from tests.e2e.test_sentinel_failover import post, stack  # noqa: F401  (a fixture)
from tests.e2e.test_worker_processes import wait_for
from tests.helpers import sink_rows
from tests.procs import CeleryProc, Web
from tests.sentinels import SentinelStack
from tests.sink import Answer, Sink

pytestmark = pytest.mark.e2e

FLAKY = {"type": "flaky"}  # the flaky playbook's effect, with no failure asked for


@pytest.fixture
def cluster() -> Iterator[PrivatePostgres]:
    """A cluster of this test's own: the shared server is never restarted."""
    try:
        c = PrivatePostgres(settings={"fsync": "off"})
    except RuntimeError as exc:
        pytest.skip(str(exc))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def bouncer(cluster: PrivatePostgres) -> Iterator[pb.PgBouncer]:
    why = pb.available()
    if why is not None:
        pytest.skip(why)
    b = pb.PgBouncer(cluster.url)
    yield b
    b.stop()


@pytest.fixture
def db(cluster: PrivatePostgres) -> Iterator[tuple[str, Engine]]:
    """The cluster's ``inbox`` database, migrated, with the sink table: its URL and an
    engine of the test's own (direct, not through the pooler)."""
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE inbox")
    url = cluster.url.rsplit("/", 1)[0] + "/inbox"
    migrate.upgrade(url)
    engine = make_engine(Settings(database_url=url))
    with engine.begin() as conn:
        conn.execute(text(sp.SINK_DDL))
    yield url, engine
    engine.dispose()


def states(engine: Engine) -> Counter[str]:
    with engine.connect() as conn:
        return Counter(
            dict(conn.execute(text("SELECT state, count(*) FROM events GROUP BY 1")).all())
        )


def test_the_suites_chaos_in_one_run_leaves_the_audit_nothing(
    db,
    bouncer,
    stack: SentinelStack,  # noqa: F811
    procs,
    cluster: PrivatePostgres,
):
    url, engine = db
    sink = Sink()
    try:
        with engine.begin() as conn:
            sstore.create_tenant(conn, "acme")
            for name, opts in (
                ("work", SourceOptions.from_dict({"event_type_path": "type"})),
                ("cb", SourceOptions.from_dict({"playbook": "forward", "event_type_path": "type"})),
            ):
                sstore.create_source(conn, "acme", name, "hmac", ["s3cret"], opts)
            estore.create_endpoint(
                conn, "acme", sink.script("/cb", Answer(200)), callbacks.new_secret()
            )
        env = {
            "DATABASE_URL": bouncer.url(url),
            "INBOX_DB_POOLER": "transaction",
            "REDIS_URL": stack.url,
            "BROKER_URL": stack.url,
            "INBOX_PLAYBOOKS": "tests.sink_playbooks",
            "INBOX_LEASE_SECONDS": "3",
            "INBOX_SWEEP_SECONDS": "1",
            "INBOX_RETRY_BASE_SECONDS": "0.05",
            "INBOX_ALLOW_PRIVATE_TARGETS": "1",
            "INBOX_DB_TIMEOUT_MS": "15000",  # a starved CPU is not an outage
        }
        sp.CRASH_DIR.mkdir(parents=True, exist_ok=True)
        (sp.CRASH_DIR / "chaos1").touch()
        web = Web(env)
        worker = CeleryProc(env, concurrency=2)
        procs += [web, worker, CeleryProc(env, kind="courier"), CeleryProc(env, kind="beat")]
        answers: list[tuple[str, int]] = []  # (source, status)

        def load(tag: str, n: int) -> None:
            for i in range(n):
                answers.append(("work", post(web, "/hooks/acme/work", f"{tag}w{i}", FLAKY)))
                alert = {"type": "fraud.alert", "account": f"{tag}-{i}"}
                answers.append(("cb", post(web, "/hooks/acme/cb", f"{tag}c{i}", alert)))

        # A worker SIGKILLed mid-step: the charge is made, the commit never comes.
        crash = {"type": "two.step", "crash": "chaos1"}
        answers.append(("work", post(web, "/hooks/acme/work", "crash", crash)))
        wait_for(lambda: len(sink_rows(engine)) == 1, 60, "the crashing step's effect")
        worker.stop(signal.SIGKILL)
        procs.append(CeleryProc(env, concurrency=2))
        load("a", 5)
        cluster.restart()  # the database goes away under every process and comes back
        engine.dispose()  # the test's own connections went with it
        load("b", 5)
        stack.kill_master()  # the Sentinels promote the replica
        load("c", 5)

        statuses = Counter(status for _, status in answers)
        assert set(statuses) <= {202, 503}, statuses  # never a 500
        accepted = statuses[202]
        callbacks_owed = sum(1 for src, status in answers if src == "cb" and status == 202)
        assert callbacks_owed > 0

        def settled() -> bool:
            with engine.connect() as conn:
                made, left = conn.execute(
                    text(
                        "SELECT count(*), count(*) FILTER (WHERE state <> 'delivered')"
                        " FROM deliveries"
                    )
                ).one()
            return states(engine) == Counter({"completed": accepted}) and (made, left) == (
                callbacks_owed,
                0,
            )

        wait_for(settled, 120, "every accepted event done, every callback delivered")
        # The killed worker's step ran again elsewhere, with the same key, once its lease
        # expired and the sweep took it back.
        charges = [r for r in sink_rows(engine) if r.step == "charge"]
        assert len(charges) == 2 and charges[0].step_key == charges[1].step_key
        assert charges[0].pid != charges[1].pid
        wait_for(lambda: beat_audited(engine), 60, "beat's audit passes")
        doc = full_audit(url)
        assert violated(doc) == {} and doc["holds"] is True
        with engine.connect() as conn:
            ever = conn.execute(text("SELECT count(*) FROM invariant_violations")).scalar_one()
        assert ever == 0  # beat's passes during the chaos opened nothing either
    finally:
        sink.close()
