"""Reconciliation: a provider's id list against what the inbox really stored."""

from __future__ import annotations

import json
import sys
import types
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from inbox.domain.errors import BadRequest
from inbox.domain.idempotency import key_digest
from inbox.services import reconcile as rec
from inbox.services.runtime import Runtime
from tests.helpers import body_of, hmac_headers, keyed_insert


def send(client, src, key, n):
    body = body_of({"n": n})
    resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key))
    assert resp.status_code == 202
    return resp.get_json()["id"]


def add_old(engine, src, key, age):
    with engine.begin() as conn:
        return conn.execute(
            text(
                keyed_insert(
                    "INSERT INTO events (public_id, tenant_id, source_id, key_digest,"
                    " content_type, body, body_sha256, response_status, response_body,"
                    " received_at) VALUES (:p, :t, :s, :kd, 'application/json', '{}',"
                    " '\\x00', 202, '', now() - CAST(:age AS interval))",
                    "public_id",
                )
            ),
            {
                "p": f"evt_old_{key}",
                "t": src.tenant_id,
                "s": src.id,
                "kd": key_digest(src.tenant_id, src.id, key),
                "age": f"{int(age.total_seconds())} seconds",
                "ke": datetime.now(UTC) + timedelta(days=1),
            },
        ).scalar_one()


@pytest.fixture
def inbox_state(client, make_source, engine):
    """acme/billing holds p1, p2, p3 (now), one event without a key, and p0 (3 days old);
    another tenant's source holds p4."""
    src = make_source(tenant="acme", name="billing")
    ids = {key: send(client, src, key, i) for i, key in enumerate(("p1", "p2", "p3"))}
    body = body_of({"no": "key"})
    assert client.post(src.path, data=body, headers=hmac_headers("s3cret", body)).status_code == 202
    ids["p0"] = add_old(engine, src, "p0", timedelta(days=3))
    other = make_source(tenant="globex", name="billing")
    send(client, other, "p4", 9)
    return src, ids


def run(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_missing_and_extra_events_are_found(inbox_state, engine, settings):
    src, ids = inbox_state
    rt = Runtime(settings, engine)
    start = rec.window_start(rt, 24)
    result = rec.check(rt, src, ["p1", "p2", "p4", "p0", "p1"], start, 24)
    # p4 is another tenant's: it does not match here; p0 is older than the window but
    # its key is still held, so it matches.
    assert result.missing == ("p4",)
    assert result.extra == (ids["p3"],)
    assert (result.provider_ids, result.matched, result.unkeyed) == (4, 3, 1)
    assert not result.consistent


def test_the_window_bounds_extra_events(inbox_state, engine, settings):
    src, ids = inbox_state
    rt = Runtime(settings, engine)
    start = rec.window_start(rt, 24 * 4)
    result = rec.check(rt, src, ["p1", "p2", "p3"], start, 24)
    assert result.extra == (ids["p0"],) and result.missing == ()


def test_the_command_reads_a_file_of_lines(inbox_state, tmp_path):
    _src, ids = inbox_state
    path = tmp_path / "ids.txt"
    path.write_text("p1\n\n  p2  \np4\n")
    out = run("reconcile", "--source", "acme/billing", "--ids", str(path))
    assert out.exit_code == 1, out.output
    lines = out.output.splitlines()
    assert "provider  3 id(s), 2 matched" in lines
    assert (
        lines[lines.index("missing   1 (the provider has them, the inbox does not)") + 1] == "  p4"
    )
    assert f"  {ids['p3']}" in lines
    assert "unkeyed   1 event(s) without a key in the window: not compared" in lines
    assert "Keys are kept 24 h after receipt" in out.output


def test_a_matching_list_from_stdin_exits_zero(inbox_state):
    out = run("reconcile", "--source", "acme/billing", "--ids", "-", input="p1\np2\np3\n")
    assert out.exit_code == 0, out.output
    assert "missing   0" in out.output and "extra     0" in out.output


@pytest.mark.parametrize(
    "export",
    [
        json.dumps({"object": "list", "data": [{"id": "p1"}, {"id": "p9"}], "has_more": False}),
        json.dumps([{"id": "p1", "type": "x"}, {"id": "p9"}]),
        json.dumps(["p1", "p9"]),
        '{"id": "p1"}\n{"id": "p9"}\n',
    ],
    ids=["stripe-list", "objects", "strings", "json-lines"],
)
def test_provider_exports_parse(inbox_state, export):
    _src, ids = inbox_state
    out = run(
        "reconcile", "--source", "acme/billing", "--ids", "-", "--format", "json", input=export
    )
    assert out.exit_code == 1, out.output
    report = json.loads(out.output)
    assert report["missing"] == ["p9"]
    assert report["extra"] == [ids["p2"], ids["p3"]]
    assert (report["provider_ids"], report["matched"], report["unkeyed"]) == (2, 1, 1)
    assert report["source"] == "acme/billing" and report["key_window_hours"] == 24


@pytest.mark.parametrize("bad", ["[1.5]", '{"items": []}', '[{"name": "x"}]', "[nope"])
def test_malformed_exports_are_refused(bad):
    with pytest.raises(BadRequest):
        rec.parse_ids(bad)


def test_a_registered_fetcher_supplies_the_list(inbox_state, monkeypatch):
    _src, ids = inbox_state
    calls = []

    def fetch(source, since):
        calls.append((source.tenant, source.name, since))
        return iter(["p1", "p2", "p3"])

    monkeypatch.setattr(rec, "FETCHERS", {})
    assert rec.register_fetcher("fake-provider", fetch) is fetch
    out = run("reconcile", "--source", "acme/billing", "--fetcher", "fake-provider")
    assert out.exit_code == 0, out.output
    ((tenant, name, since),) = calls
    assert (tenant, name) == ("acme", "billing")
    assert abs(since - (datetime.now(UTC) - timedelta(hours=24))) < timedelta(minutes=1)

    module = types.ModuleType("fake_provider_module")
    module.fetch = lambda source, since: ["p1"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_provider_module", module)
    out = run(
        "reconcile",
        "--source",
        "acme/billing",
        "--fetcher",
        "fake_provider_module:fetch",
        "--since",
        "2000-01-01T00:00:00",
        "--json",
    )
    report = json.loads(out.output)
    assert report["since"] == "2000-01-01T00:00:00+00:00"
    assert report["extra"] == [ids["p0"], ids["p2"], ids["p3"]]


def test_the_command_needs_exactly_one_list(inbox_state, tmp_path):
    (tmp_path / "ids").write_text("p1\n")
    both = ["--ids", str(tmp_path / "ids"), "--fetcher", "x"]
    assert run("reconcile", "--source", "acme/billing", *both).exit_code == 2
    assert run("reconcile", "--source", "acme/billing").exit_code == 2
    unknown = run("reconcile", "--source", "acme/billing", "--fetcher", "nope")
    assert unknown.exit_code == 1 and "No fetcher 'nope'" in unknown.output


def test_hooks_get_every_result_and_one_failing_does_not_stop_the_rest(inbox_state, monkeypatch):
    seen = []

    def broken(result):
        raise RuntimeError("metrics down")

    monkeypatch.setattr(rec, "HOOKS", [broken, seen.append])
    out = run("reconcile", "--source", "acme/billing", "--ids", "-", input="p1\np9\n")
    assert out.exit_code == 1 and "p9" in out.output
    (result,) = seen
    assert (result.tenant, result.source) == ("acme", "billing")
    assert (len(result.missing), len(result.extra)) == (1, 2)
