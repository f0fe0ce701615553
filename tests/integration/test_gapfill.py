"""Gaps found at the provider: local fakes of Stripe's events list and a GitHub hook's
deliveries (Stripe- and GitHub-shaped JSON over real HTTP), the real database, the
receiver and a worker. Never the internet."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner
from sqlalchemy import text

import tests.sink_playbooks  # noqa: F401  (registers two.step)
from inbox.cli import main
from inbox.infra import metrics
from inbox.infra.config import Settings
from inbox.services import gapfill
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from tests.helpers import sink_rows

KEY = "sk_test_reconcile_Zq9"
TOKEN = "ghp_reconcile_token_X7"
PAGE = 2  # the fakes answer in pages this small, whatever is asked, to exercise paging


class FakeProvider:
    """Stripe's ``GET /v1/events`` and GitHub's hook deliveries, as their docs describe."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []  # newest first, as Stripe lists them
        self.deliveries: list[dict[str, Any]] = []  # newest first, as GitHub lists them
        self.requests: list[tuple[str, str, str]] = []  # method, path?query, authorization
        self.redelivered: list[int] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def _send(self, status: int, doc: object, link: str | None = None) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if link:
                    self.send_header("Link", link)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                auth = self.headers.get("Authorization", "")
                fake.requests.append(("GET", self.path, auth))
                self._send(*fake.get(self.path, auth))

            def do_POST(self) -> None:
                fake.requests.append(("POST", self.path, self.headers.get("Authorization", "")))
                parts = urlsplit(self.path).path.split("/")
                # /repos/octo/shop/hooks/7/deliveries/{id}/attempts
                if parts[:7] == ["", "repos", "octo", "shop", "hooks", "7", "deliveries"] and (
                    parts[8:] == ["attempts"]
                ):
                    fake.redelivered.append(int(parts[7]))
                    return self._send(202, {})
                return self._send(404, {"message": "Not Found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def get(self, path: str, auth: str) -> tuple[int, object, str | None]:
        url = urlsplit(path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/v1/events":
            if auth != f"Bearer {KEY}":
                return 401, {"error": {"message": "Invalid API Key"}}, None
            rows = [e for e in self.events if e["created"] >= int(q["created[gte]"])]
            if "starting_after" in q:
                rows = rows[[e["id"] for e in rows].index(q["starting_after"]) + 1 :]
            page = {"object": "list", "has_more": len(rows) > PAGE, "data": rows[:PAGE]}
            return 200, page, None
        if url.path == "/repos/octo/shop/hooks/7/deliveries":
            if auth != f"Bearer {TOKEN}":
                return 401, {"message": "Bad credentials"}, None
            start = int(q.get("cursor", "0"))
            link = None
            if start + PAGE < len(self.deliveries):
                nxt = f"{self.base}{url.path}?per_page={PAGE}&cursor={start + PAGE}"
                link = f'<{nxt}>; rel="next"'
            return 200, self.deliveries[start : start + PAGE], link
        return 404, {"message": "Not Found"}, None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=30)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    f = FakeProvider()
    yield f
    f.close()


@pytest.fixture
def wsettings(settings):
    return Settings(database_url=settings.database_url, retry_base_seconds=0.01)


def ref(src: Any) -> str:
    return f"{src.tenant}/{src.name}"


def run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def stripe_event(eid: str, created: int, n: int) -> dict[str, Any]:
    return {
        "id": eid,
        "object": "event",
        "api_version": "2024-06-20",
        "created": created,
        "data": {"object": {"id": f"ch_{n}", "object": "charge", "amount": 100 * n}},
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None},
        "type": "two.step",
    }


def stripe_post(client, src, event: dict[str, Any], **changes: Any):
    """The original webhook delivery: Stripe's own bytes (spaced as Stripe sends them)."""
    body = json.dumps({**event, **changes}, indent=2).encode()
    ts = int(time.time())
    sig = hmac.new(b"whsec_rec", f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return client.post(
        src.path,
        data=body,
        headers={"content-type": "application/json", "stripe-signature": f"t={ts},v1={sig}"},
    )


def counter(tenant: str, source: str, action: str) -> float:
    return metrics.RECONCILE_GAPS_FILLED.labels(tenant, source, action)._value.get()


def drain_all(engine, wsettings) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            left = conn.execute(
                text("SELECT count(*) FROM events WHERE state NOT IN ('completed','quarantined')")
            ).scalar_one()
        if not left:
            return
        drain_once(Runtime(wsettings, engine))
    raise AssertionError("events still pending after 60 s")


def test_stripe_gap_is_imported_once_and_a_late_original_is_a_duplicate(
    client, make_source, engine, wsettings, fake, tmp_path, sink_table, caplog
):
    creds = tmp_path / "stripe.key"
    creds.write_text(KEY + "\n")
    src = make_source(
        scheme="stripe",
        secrets_=("whsec_rec",),
        reconcile={"fetcher": "stripe", "credentials": str(creds), "api_base": fake.base},
    )
    now = int(time.time())
    events = [stripe_event(f"evt_{n}", now - 60 * (10 - n), n) for n in range(1, 6)]
    old = stripe_event("evt_0", now - 86400 * 3, 0)  # before --since: not asked for
    fake.events = [*reversed(events), old]
    # evt_1 and evt_4 arrived as webhooks; evt_2, evt_3 and evt_5 never did.
    for e in (events[0], events[3]):
        assert stripe_post(client, src, e).status_code == 202
    since = datetime.fromtimestamp(now - 3600, UTC).isoformat()

    caplog.set_level(logging.DEBUG)
    first = run("reconcile", "--source", ref(src), "--since", since, "--format", "json")
    assert first.exit_code == 0, first.output
    doc = json.loads(first.output)
    assert (doc["provider_ids"], doc["imported"]) == (5, 3)
    assert sorted(doc["missing"]) == ["evt_2", "evt_3", "evt_5"]
    # Paged with starting_after while has_more; created[gte] is the --since.
    queries = [parse_qs(urlsplit(p).query) for m, p, _ in fake.requests if m == "GET"]
    assert len(queries) == 3
    assert [q.get("starting_after") for q in queries] == [None, ["evt_4"], ["evt_2"]]
    assert {q["created[gte]"][0] for q in queries} == {str(now - 3600)}
    assert counter(src.tenant, src.name, "imported") == 3
    assert KEY not in caplog.text and KEY not in first.output

    second = run("reconcile", "--source", ref(src), "--since", since, "--format", "json")
    assert json.loads(second.output)["imported"] == 0
    assert counter(src.tenant, src.name, "imported") == 3

    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT e.public_id, e.verification->>'reconciled' AS rec, e.event_type"
                " FROM events e WHERE e.source_id = :s ORDER BY e.id"
            ),
            {"s": src.id},
        ).all()
        audited = conn.execute(
            text(
                "SELECT detail->>'public_id' FROM audit_log WHERE action = 'reconciled'"
                " AND actor = 'reconcile'"
            )
        ).scalars()
        audited_ids = set(audited)
    assert len(rows) == 5
    reconciled = {r.public_id for r in rows if r.rec == "true"}
    assert len(reconciled) == 3 and audited_ids == reconciled
    assert {r.event_type for r in rows} == {"two.step"}

    # The late original of evt_3: Stripe's own spacing, pending_webhooks restamped.
    late = stripe_post(client, src, events[2], pending_webhooks=0)
    assert late.status_code == 202
    assert late.headers.get("Idempotent-Replayed") == "true"
    assert late.get_json()["id"] in reconciled

    drain_all(engine, wsettings)
    charges = [r.event for r in sink_rows(engine) if r.step == "charge"]
    assert sorted(charges) == sorted(r.public_id for r in rows)  # each event charged once
    late_again = stripe_post(client, src, events[2], pending_webhooks=0)
    assert late_again.headers.get("Idempotent-Replayed") == "true"
    drain_all(engine, wsettings)
    assert len([r for r in sink_rows(engine) if r.step == "charge"]) == 5


def test_the_schedule_runs_each_source_when_its_interval_has_passed(
    make_source, engine, fake, tmp_path
):
    creds = tmp_path / "stripe.key"
    creds.write_text(KEY)
    src = make_source(
        scheme="stripe",
        secrets_=("whsec_rec",),
        reconcile={
            "fetcher": "stripe",
            "credentials": str(creds),
            "api_base": fake.base,
            "every_minutes": 60,
        },
    )
    fake.events = [stripe_event("evt_s1", int(time.time()) - 30, 1)]
    first = gapfill.run_due(Runtime(Settings(key_ttl_hours=24), engine))
    assert [(r.source, r.imported) for r in first if r.source == src.name] == [(src.name, 1)]
    again = gapfill.run_due(Runtime(Settings(key_ttl_hours=24), engine))  # within the hour: not due
    assert [r for r in again if r.source == src.name] == []
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE audit_log SET at = at - interval '61 minutes'"
                " WHERE action = 'reconcile_run' AND subject_id = :s"
            ),
            {"s": src.id},
        )
    later = gapfill.run_due(Runtime(Settings(key_ttl_hours=24), engine))
    assert [(r.source, r.imported) for r in later if r.source == src.name] == [(src.name, 0)]


def github_post(client, src, guid: str, payload: dict[str, Any]):
    body = json.dumps(payload).encode()
    sig = hmac.new(b"gh_secret", body, hashlib.sha256).hexdigest()
    return client.post(
        src.path,
        data=body,
        headers={
            "content-type": "application/json",
            "x-github-delivery": guid,
            "x-github-event": "push",
            "x-hub-signature-256": f"sha256={sig}",
        },
    )


def delivery(did: int, guid: str, status: int, at: datetime) -> dict[str, Any]:
    return {
        "id": did,
        "guid": guid,
        "delivered_at": at.isoformat().replace("+00:00", "Z"),
        "redelivery": False,
        "duration": 0.3,
        "status": "OK" if status < 300 else "Bad Gateway",
        "status_code": status,
        "event": "push",
        "action": None,
        "installation_id": None,
        "repository_id": 1,
    }


def test_github_failed_deliveries_are_redelivered_once(
    client, make_source, engine, fake, tmp_path, caplog
):
    creds = tmp_path / "github.token"
    creds.write_text(TOKEN)
    src = make_source(
        scheme="github",
        secrets_=("gh_secret",),
        reconcile={
            "fetcher": "github",
            "credentials": str(creds),
            "api_base": fake.base,
            "hook": "octo/shop/7",
        },
    )
    now = datetime.now(UTC)
    fake.deliveries = [
        delivery(15, "g-ok", 200, now - timedelta(minutes=1)),  # received by the inbox
        delivery(14, "g-failed", 502, now - timedelta(minutes=2)),  # lost: redeliver
        delivery(13, "g-elsewhere", 200, now - timedelta(minutes=3)),  # GitHub saw a 2xx
        delivery(12, "g-failed2", 0, now - timedelta(minutes=4)),  # timed out: redeliver
        delivery(11, "g-old", 502, now - timedelta(days=3)),  # before --since
    ]
    assert github_post(client, src, "g-ok", {"ref": "main", "n": 1}).status_code == 202
    since = (now - timedelta(hours=1)).isoformat()

    caplog.set_level(logging.DEBUG)
    out = run("reconcile", "--source", ref(src), "--since", since, "--format", "json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert (doc["provider_ids"], doc["imported"], doc["redelivered"]) == (4, 0, 2)
    assert sorted(doc["missing"]) == ["g-elsewhere", "g-failed", "g-failed2"]
    assert sorted(fake.redelivered) == [12, 14]
    gets = [p for m, p, _ in fake.requests if m == "GET"]
    assert len(gets) == 3 and "cursor=2" in gets[1] and "cursor=4" in gets[2]
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth in fake.requests)
    assert TOKEN not in caplog.text and TOKEN not in out.output
    assert counter(src.tenant, src.name, "redelivered") == 2

    # GitHub redelivers them, signed, with their original X-GitHub-Delivery.
    for guid in ("g-failed", "g-failed2"):
        assert github_post(client, src, guid, {"ref": "main", "g": guid}).status_code == 202
    again = run("reconcile", "--source", ref(src), "--since", since, "--format", "json")
    assert json.loads(again.output)["redelivered"] == 0
    assert sorted(fake.redelivered) == [12, 14]  # no second POST
    with engine.connect() as conn:
        n = conn.execute(
            text("SELECT count(*) FROM events WHERE source_id = :s"), {"s": src.id}
        ).scalar_one()
    assert n == 3


def test_a_source_without_the_option_or_with_a_bad_one_is_refused(make_source, tmp_path):
    src = make_source(scheme="stripe", secrets_=("whsec_rec",))
    out = CliRunner().invoke(main, ["reconcile", "--source", ref(src)])
    assert out.exit_code != 0 and "no reconcile option" in out.output
    with pytest.raises(Exception, match="hook"):
        make_source(
            scheme="github",
            reconcile={"fetcher": "github", "credentials": str(tmp_path / "t")},
        )
    missing = make_source(
        scheme="stripe",
        secrets_=("whsec_rec",),
        reconcile={"fetcher": "stripe", "credentials": str(tmp_path / "absent")},
    )
    out = CliRunner().invoke(main, ["reconcile", "--source", ref(missing)])
    assert out.exit_code != 0 and "credentials file" in out.output


def test_the_beat_task_fills_the_gaps_of_due_sources(
    request, make_source, engine, settings, fake, tmp_path
):
    from workers import state, tasks
    from workers.app import app

    assert app.conf.beat_schedule["inbox-reconcile"]["task"] == "inbox.reconcile"
    state.use(state.WorkerState(settings, app, engine_=engine))
    request.addfinalizer(lambda: state.use(None))
    creds = tmp_path / "stripe.key"
    creds.write_text(KEY)
    make_source(
        scheme="stripe",
        secrets_=("whsec_rec",),
        reconcile={"fetcher": "stripe", "credentials": str(creds), "api_base": fake.base},
    )
    fake.events = [stripe_event("evt_b1", int(time.time()) - 30, 1)]
    assert tasks.reconcile_sources() == {"sources": 1, "imported": 1, "redelivered": 0}
    assert tasks.reconcile_sources() == {"sources": 0, "imported": 0, "redelivered": 0}
