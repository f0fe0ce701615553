"""Hostile and sloppy input: every refusal is a 4xx with a JSON body, and nothing is stored.

503 is kept for a database that is really down or slow (tests/integration/test_unavailable.py).
"""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy import Engine, text

from inbox.store.write import tokens as tstore
from tests.helpers import body_of, hmac_headers

SECRET = "s3cret"


def count(engine: Engine, sql: str = "SELECT count(*) FROM events") -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def bearer(engine: Engine, role: str = "operator") -> dict[str, str]:
    with engine.begin() as conn:
        _, secret = tstore.create_token(conn, f"hostile-{role}-{secrets.token_hex(4)}", role)
    return {"Authorization": f"Bearer {secret}"}


def assert_json_4xx(resp, status: int = 400) -> None:
    assert resp.status_code == status, (resp.status_code, resp.data[:300])
    assert resp.is_json and resp.json["error"]["code"], resp.data[:300]
    assert "Retry-After" not in resp.headers


def nested(depth: int, open_: str = "[", close: str = "]") -> bytes:
    return (open_ * depth + close * depth).encode()


def nested_objects(depth: int) -> bytes:
    return ('{"a":' * depth + "1" + "}" * depth).encode()


@pytest.mark.parametrize("body", [nested(100_000), nested_objects(60_000), nested(257)])
def test_deep_json_at_ingest_is_400_and_stores_nothing(client, make_source, engine, body):
    src = make_source()
    resp = client.post(src.path, data=body, headers=hmac_headers(SECRET, body, "deep"))
    assert_json_4xx(resp)
    assert "deep" in resp.json["error"]["message"]
    assert count(engine) == 0


def test_json_at_the_depth_limit_is_accepted(client, make_source, engine):
    src = make_source()
    body = ('{"a":' + "[" * 254 + "1" + "]" * 254 + "}").encode()  # 255 levels
    resp = client.post(src.path, data=body, headers=hmac_headers(SECRET, body, "ok"))
    assert resp.status_code == 202, resp.data
    # Brackets inside strings are text, not depth.
    body = body_of({"s": "[" * 1000 + '\\"[' * 10})
    resp = client.post(src.path, data=body, headers=hmac_headers(SECRET, body, "str"))
    assert resp.status_code == 202, resp.data


@pytest.mark.parametrize("body", [nested(100_000), nested_objects(60_000)])
def test_deep_json_in_the_admin_api_is_400(client, engine, body):
    headers = {**bearer(engine), "Content-Type": "application/json"}
    resp = client.post("/api/v1/replays", data=body, headers=headers)
    assert_json_4xx(resp)
    assert count(engine, "SELECT count(*) FROM bulk_replays") == 0


def test_a_lone_surrogate_in_the_event_type_is_400(client, make_source, engine):
    src = make_source(event_type_path="type")
    body = b'{"type":"a\\ud800b"}'
    resp = client.post(src.path, data=body, headers=hmac_headers(SECRET, body, "sur"))
    assert_json_4xx(resp)
    assert count(engine) == 0


def test_a_lone_surrogate_in_a_business_key_is_400(client, make_source, engine):
    src = make_source(business_key_paths=["acct"])
    body = b'{"acct":"\\udfff"}'
    resp = client.post(src.path, data=body, headers=hmac_headers(SECRET, body, "sur2"))
    assert_json_4xx(resp)
    assert count(engine) == 0


def test_a_nul_in_the_event_type_is_400(client, make_source, engine):
    src = make_source(event_type_path="type")
    body = b'{"type":"a\\u0000b"}'
    resp = client.post(src.path, data=body, headers=hmac_headers(SECRET, body, "nul"))
    assert_json_4xx(resp)
    assert count(engine) == 0


@pytest.mark.parametrize(
    "path", ["/hooks/acme%00/own", "/hooks/acme/own%00", "/hooks/a%ed%a0%80/b"]
)
def test_a_nul_or_bad_byte_in_the_route_is_4xx_never_503(client, path):
    body = b"{}"
    resp = client.post(path, data=body, headers=hmac_headers(SECRET, body, "x"))
    assert resp.status_code in (400, 404), resp.data
    assert resp.is_json and "Retry-After" not in resp.headers


def test_an_overlong_route_segment_is_4xx(client):
    resp = client.post("/hooks/" + "a" * 5000 + "/b", data=b"{}")
    assert resp.status_code in (400, 404) and resp.is_json


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/events?tenant=%00",
        "/api/v1/events?source=a%00b",
        "/api/v1/events?type=%00",
        "/api/v1/events?endpoint=%00",
        "/api/v1/events/%00",
        "/api/v1/events/evt_%00/replay",
        "/api/v1/deliveries?tenant=%00",
        "/api/v1/deliveries/%00",
        "/api/v1/replays/%00",
        "/api/v1/events?tenant=" + "x" * 5000,
        "/api/v1/events?since=2026-01-01T00:00:00%00",
    ],
)
def test_bad_values_in_the_admin_api_are_400_never_503(client, engine, path):
    headers = bearer(engine)
    method = client.post if path.endswith("/replay") else client.get
    resp = method(path, headers=headers)
    assert resp.status_code in (400, 404), (resp.status_code, resp.data[:300])
    assert resp.is_json and "Retry-After" not in resp.headers


@pytest.mark.parametrize("path", ["/api/v1/events?type=%00", "/ui/events?type=%00"])
def test_the_edge_check_runs_before_the_check_of_who_is_calling(client, path):
    """web/validate.py registers its check through Flask's public ``before_request``: it
    must still run before the blueprints' own (the API's bearer token, the console's
    session), so a bad value is the 400 even for a caller with no credentials."""
    resp = client.get(path)
    assert resp.status_code == 400, (resp.status_code, resp.data[:300])
    assert b"query argument" in resp.data


def test_the_edge_check_leaves_other_blueprints_alone(client):
    """Health and metrics read no query arguments: the check is the API's and console's."""
    assert client.get("/healthz?x=%00").status_code == 200


@pytest.mark.parametrize("last_id", [2**63, 2**64 + 5, -(2**63) - 1, 10**40])
def test_a_cursor_beyond_bigint_is_400(client, engine, last_id):
    from web.common import encode_cursor

    headers = bearer(engine)
    for listing in ("events", "deliveries"):
        resp = client.get(f"/api/v1/{listing}?cursor={encode_cursor(last_id)}", headers=headers)
        assert_json_4xx(resp)


def test_the_backstop_maps_a_data_error_to_400_not_503(app, client):
    """A value the database refuses (sqlstate class 22) that slipped past the edge checks."""
    import psycopg
    from sqlalchemy import text as sql

    from web.services import services

    @app.get("/probe-data-error")
    def _probe():
        with services().engine.connect() as conn:
            conn.execute(sql("SELECT CAST(:v AS integer)"), {"v": "not a number"})
        return {}

    @app.get("/probe-driver-data-error")
    def _probe_driver():
        raise psycopg.errors.NumericValueOutOfRange("out of range")

    for path in ("/probe-data-error", "/probe-driver-data-error"):
        resp = client.get(path)
        assert_json_4xx(resp)


def test_an_error_that_is_not_the_stores_stays_a_500(app, client):
    """The handler for driver errors is registered for Exception (so that web names no
    driver type): what the store does not own must still reach Flask as a 500, for the
    API and the console alike, and never pass for a 400 or a 503."""
    app.config["PROPAGATE_EXCEPTIONS"] = False  # as in production: Flask answers 500

    @app.get("/probe-bug")
    def _probe_bug():
        raise KeyError("a bug")

    resp = client.get("/probe-bug")
    assert resp.status_code == 500 and "Retry-After" not in resp.headers


def test_the_console_hands_an_error_not_the_stores_to_flask(app):
    """The console's handler is registered for Exception too: a driver error is its page,
    anything else goes on to Flask's 500."""
    import psycopg

    from web.ui import errors as ui_errors

    with app.test_request_context("/ui/events"):
        with pytest.raises(KeyError):
            ui_errors._database_down(KeyError("a bug"))
        down = ui_errors._database_down(psycopg.OperationalError("connection refused"))
        assert down.status_code == 503 and down.headers["Retry-After"]
        refused = ui_errors._database_down(psycopg.errors.NumericValueOutOfRange("range"))
        assert refused.status_code == 400


def test_a_database_that_does_not_answer_is_503_with_retry_after(app, client):
    import psycopg

    @app.get("/probe-down")
    def _probe_down():
        raise psycopg.OperationalError("connection refused")

    resp = client.get("/probe-down")
    assert resp.status_code == 503 and resp.headers["Retry-After"]
    assert resp.get_json()["error"]["cause"] == "database"


@pytest.mark.parametrize(
    "path",
    [
        "/ui/events?tenant=%00",
        "/ui/events/%00",
        "/ui/events?cursor=djE6OTk5OTk5OTk5OTk5OTk5OTk5OTk5",
    ],
)
def test_bad_values_in_the_console_are_400_never_503(client, engine, path):
    from tests.integration.test_ui import new_token, sign_in

    sign_in(client, new_token(engine, "hostile-ui", "viewer"))
    resp = client.get(path)
    assert resp.status_code in (400, 404), (resp.status_code, resp.data[:300])
    assert "Retry-After" not in resp.headers


def test_crlf_in_the_sign_in_next_is_dropped(client, engine):
    from tests.integration.test_ui import csrf_of, new_token

    secret = new_token(engine, "hostile-crlf", "viewer")
    evil = "/ui/events\r\nSet-Cookie: x=1"
    assert client.get("/ui/login", query_string={"next": evil}).status_code == 200
    form = {"token": secret, "csrf": csrf_of(client), "next": evil}
    resp = client.post("/ui/login", data=form)
    assert resp.status_code == 302, resp.status_code
    assert "Set-Cookie" not in resp.headers["Location"]  # went to the dashboard instead
    assert "x=1" not in resp.headers.get("Set-Cookie", "")
