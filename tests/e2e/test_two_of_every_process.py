"""Two of every process against one PostgreSQL and one broker: exactly-once effects.

Two "hosts", each a web process (``python -m web``), a worker, a courier and a beat, with
a Prometheus directory of its own (as two machines would have); one database and one
private redis-server between them. Copies of each event go to both web processes at
once. The test speaks only through public surfaces (the CLI, HTTP ingest, the admin
API, the console, /metrics) and counts effects where they land: the playbook's sink
table and an HTTP sink that receives the callbacks.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.brokers import PrivateRedis
from tests.e2e.test_console_processes import CSRF, cookies_of
from tests.e2e.test_console_processes import request as browse
from tests.e2e.test_receiver_processes import fire_together
from tests.e2e.test_worker_processes import wait_for
from tests.helpers import body_of, hmac_headers, sink_rows
from tests.procs import BIN, ROOT, CeleryProc, Web
from tests.sink import Sink

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("sink_table")]

KEYS = 40  # each sent COPIES times at once, half of the copies to each web process
COPIES = 4
UNIQUE = 20  # sent once each
EVENTS = KEYS + UNIQUE
METRICS_TOKEN = "scrape-" + "x" * 24
TENANT, SOURCE = "acme", "pay"
SENT_SWEEP = "Sending due task inbox-sweep"  # celery beat's line for each sweep it sends


def cli(*args: str) -> str:
    """The operator's CLI as a process of its own (DATABASE_URL and INBOX_KEK inherited)."""
    out = subprocess.run(
        [str(BIN / "inbox"), *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def get_json(server: Web, path: str, token: str) -> dict:
    status, _, body = server.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    assert status == 200, (path, status, body[:500])
    answer: dict = json.loads(body)
    return answer


def listing(server: Web, path: str, token: str) -> list[dict]:
    """Every item of an admin API list, page after page."""
    items: list[dict] = []
    cursor = ""
    while True:
        sep = "&" if "?" in path else "?"
        page = get_json(server, f"{path}{sep}limit=500{cursor}", token)
        items += page["items"]
        if not page["next_cursor"]:
            return items
        cursor = f"&cursor={page['next_cursor']}"


def scrape(server: Web) -> list[tuple[str, dict[str, str], float]]:
    auth = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    status, _, body = server.request("GET", "/metrics", headers=auth)
    assert status == 200, body[:500]
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    ]


def total(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    return sum(
        v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items())
    )


def start_host(env: dict[str, str | None], procs: list) -> Web:
    """One host's web, worker, courier and beat; the web process once it answers."""
    celery_env = {k: v for k, v in env.items() if v is not None}
    for kind in ("worker", "courier", "beat"):
        procs.append(CeleryProc(celery_env, kind=kind, concurrency=2 if kind == "worker" else 4))
    web = Web(env, workers=1)
    procs.append(web)
    return web


def celery_ready(proc: CeleryProc) -> bool:
    if proc.popen.poll() is not None:
        raise AssertionError(f"{proc.name} exited:\n{proc.output()[-3000:]}")
    out = proc.output()
    if "beat" in proc.name:  # once its first sweep was due: sent, or left to the other beat
        return SENT_SWEEP in out or "beat: standing by" in out
    return " ready." in out


def console_session_crosses_processes(a: Web, b: Web, token: str) -> None:
    """Signed in on A, the cookie works on B; signed out on B, A refuses it."""
    jar: dict[str, str] = {}
    _, headers, page = browse(a, "GET", "/ui/login", jar)
    jar.update(cookies_of(headers))
    form = {"token": token, "csrf": CSRF.search(page).group(1)}
    status, headers, _ = browse(a, "POST", "/ui/login", jar, form)
    assert status == 302
    jar.update(cookies_of(headers))
    signed_in = dict(jar)
    assert browse(a, "GET", "/ui/events", jar)[0] == 200
    status, _, page = browse(b, "GET", "/ui/events", jar)
    assert status == 200  # the session lives in the database, not in A
    status, _, _ = browse(b, "POST", "/ui/logout", jar, {"csrf": CSRF.search(page).group(1)})
    assert status == 302
    status, headers, _ = browse(a, "GET", "/ui/events", signed_in)
    location = {k.lower(): v for k, v in headers}["location"]
    assert status == 302 and "/ui/login" in location


def test_two_of_every_process_keep_every_effect_exactly_once(
    database_url, engine, private_redis: PrivateRedis, sink: Sink, procs, tmp_path
):
    cli("tenants", "create", TENANT)
    cli("sources", "create", "--tenant", TENANT, "--name", SOURCE, "--scheme", "hmac",
        "--secret", "s3cret", "--option", 'event_type_path="type"')  # fmt: skip
    cli("endpoints", "create", "--tenant", TENANT, "--url", sink.url("/told"))
    token = cli("tokens", "create", "--name", "ops", "--role", "operator").split()[-1]
    common: dict[str, str | None] = {
        "DATABASE_URL": database_url,
        "REDIS_URL": private_redis.url,
        "BROKER_URL": private_redis.url,
        "INBOX_PLAYBOOKS": "tests.sink_playbooks",
        "INBOX_ALLOW_PRIVATE_TARGETS": "1",
        # Small batches, so both workers take part; a sweep every second from each beat.
        "INBOX_BATCH_SIZE": "5",
        "INBOX_SWEEP_SECONDS": "1",
        "INBOX_METRICS_TOKEN": METRICS_TOKEN,
        "INBOX_SECRET_KEY": None,  # nothing shared between the web processes but the database
        "INBOX_DB_POOL_SIZE": "5",
    }
    webs = [
        start_host({**common, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / host)}, procs)
        for host in ("metrics-a", "metrics-b")
    ]
    a, b = webs
    celery = [p for p in procs if isinstance(p, CeleryProc)]
    wait_for(lambda: all(celery_ready(p) for p in celery), 90, "every celery process")

    console_session_crosses_processes(a, b, token)

    # Every copy of every key at once, each on its own connection: two copies at each web.
    plan: list[tuple[str, Web]] = [
        (f"dup-{k}", webs[(k + c) % 2]) for k in range(KEYS) for c in range(COPIES)
    ]
    plan += [(f"one-{u}", webs[u % 2]) for u in range(UNIQUE)]
    random.Random(14).shuffle(plan)
    requests = []
    for key, _ in plan:
        body = body_of({"type": "charge.tell", "id": key})
        requests.append((body, hmac_headers("s3cret", body, key)))
    answers = fire_together([w for _, w in plan], requests, f"/hooks/{TENANT}/{SOURCE}")
    got = [r for r in answers if r is not None]
    assert len(got) == len(plan), "some requests got no answer"
    statuses = Counter(status for status, _, _ in got)
    assert statuses == {202: len(plan)}, statuses  # no 5xx, no 409: copies are duplicates

    first: dict[str, str] = {}
    bodies: dict[str, set[bytes]] = {}
    per_web = {w.port: Counter[str]() for w in webs}
    for (key, web), (_, headers, body) in zip(plan, got, strict=True):
        bodies.setdefault(key, set()).add(body)
        replayed = headers.get("idempotent-replayed") == "true"
        per_web[web.port]["duplicate" if replayed else "accepted"] += 1
        if not replayed:
            assert key not in first, f"{key} was accepted twice"
            first[key] = json.loads(body)["id"]
    assert len(first) == EVENTS  # one first answer per key...
    assert all(len(b) == 1 for b in bodies.values())  # ...and every copy heard the same

    def finished() -> bool:
        done = listing(a, "/api/v1/events?state=completed", token)
        sent = listing(b, "/api/v1/deliveries?state=delivered", token)
        return len(done) == EVENTS and len(sent) == EVENTS and len(sink.at("/told")) >= EVENTS

    wait_for(finished, 120, "every event completed and every callback delivered")

    # One decision per event, with each step run once and one delivery made.
    events = listing(b, "/api/v1/events", token)
    assert sorted(e["public_id"] for e in events) == sorted(first.values())
    webhook_ids = set()
    for i, (key, public_id) in enumerate(first.items()):
        e = get_json(webs[i % 2], f"/api/v1/events/{public_id}", token)
        assert (e["state"], e["attempts"], e["decision"]) == ("completed", 1, {"told": True})
        assert [(s["name"], s["attempt"]) for s in e["steps"]] == [("charge", 1), ("tell", 1)]
        assert [d["state"] for d in e["deliveries"]] == ["delivered"]
        webhook_ids.add(e["deliveries"][0]["public_id"])
        assert e["duplicate_count"] == (COPIES - 1 if key.startswith("dup-") else 0)

    # The playbook's effects: each step key once at the sink table, by both workers.
    rows = sink_rows(engine)
    assert Counter(Counter(r.step_key for r in rows).values()) == {1: 2 * EVENTS}
    assert {r.event for r in rows} == set(first.values())
    assert len({r.pid for r in rows}) >= 2, "one worker did all the work"

    # The callbacks: one per event, each webhook-id received once (the sink always said 200).
    told = sink.at("/told")
    assert Counter(Counter(r.headers["webhook-id"] for r in told).values()) == {1: EVENTS}
    assert {r.headers["webhook-id"] for r in told} == webhook_ids
    assert sorted(json.loads(r.body)["data"]["id"] for r in told) == sorted(first)

    # Metrics: each web process counts what it answered; the hosts' workers and couriers
    # count what they did, and the sums are the totals.
    ts = {"tenant": TENANT, "source": SOURCE}
    counted = Counter[str]()
    for web in webs:
        samples = scrape(web)
        mine = {
            "accepted": total(samples, "inbox_events_accepted_total", **ts),
            "duplicate": total(samples, "inbox_duplicate_deliveries_total", **ts),
        }
        assert mine == per_web[web.port], (web.port, mine)  # its own answers, no other's
        counted.update(mine)
    assert counted == {"accepted": EVENTS, "duplicate": len(plan) - EVENTS}

    def worker_totals() -> tuple[float, float]:
        both = [scrape(w) for w in webs]
        done = sum(
            total(s, "inbox_event_processing_seconds_count", state="completed", **ts) for s in both
        )
        sent = sum(total(s, "inbox_delivery_attempts_total", outcome="delivered") for s in both)
        return done, sent

    wait_for(lambda: min(worker_totals()) >= EVENTS, 30, "the workers' metrics")
    assert worker_totals() == (EVENTS, EVENTS)
    status, _, _ = a.request("GET", "/metrics")
    assert status == 401  # the token is needed

    # No lease expired, so no step could have run twice; the sweeps re-ran nothing.
    requeued = sum(total(scrape(w), "inbox_sweep_requeued_total") for w in webs)
    assert requeued == 0

    # Two beats, one sweep schedule: one beat sent every sweep, the other stood by...
    beats = [p for p in procs if isinstance(p, CeleryProc) and "beat" in p.name]
    leading = [p for p in beats if SENT_SWEEP in p.output()]
    assert len(leading) == 1, [p.output()[-2000:] for p in beats]
    standby = next(p for p in beats if p is not leading[0])
    assert "beat: standing by" in standby.output()
    # ...and takes over once the leader is gone (killed: its lease lapses, unreleased).
    leading[0].stop(signal.SIGKILL)
    wait_for(lambda: SENT_SWEEP in standby.output(), 60, "the other beat to take over")
