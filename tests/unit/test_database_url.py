"""DATABASE_URL in both of libpq's multi-host forms (``inbox.store.db.engine.sqlalchemy_url``).

What reaches the driver is what libpq would make of the URL: one comma-separated host
list, one port per host (empty: the default) and every other parameter as given.
"""

from __future__ import annotations

import pytest
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import make_url

from inbox.store.db.engine import sqlalchemy_url


def driver_args(url: str) -> dict[str, object]:
    """The keyword arguments SQLAlchemy's psycopg dialect passes to psycopg.connect."""
    args, kwargs = PGDialect_psycopg().create_connect_args(make_url(sqlalchemy_url(url)))
    assert args == []
    return dict(kwargs)


def test_a_host_list_in_the_netloc_reaches_the_driver_as_libpq_lists():
    url = "postgresql://inbox:s3cr%40t@db1:5432,db2:5433/inbox?target_session_attrs=read-write"
    assert driver_args(url) == {
        "user": "inbox",
        "password": "s3cr@t",
        "dbname": "inbox",
        "host": "db1,db2",
        "port": "5432,5433",
        "target_session_attrs": "read-write",
    }


def test_the_same_list_in_the_query_gives_the_same_arguments():
    netloc = "postgresql://inbox@db1:5432,db2:5433/inbox?target_session_attrs=read-write"
    query = "postgresql://inbox@/inbox?host=db1,db2&port=5432,5433&target_session_attrs=read-write"
    assert driver_args(netloc) == driver_args(query)
    assert sqlalchemy_url(query) == "postgresql+psycopg://" + query.split("://", 1)[1]


def test_hosts_without_ports_take_the_default_each():
    assert driver_args("postgres://u@db1,db2,db3/inbox") == {
        "user": "u",
        "dbname": "inbox",
        "host": "db1,db2,db3",
        "port": ",,",  # three empty entries: libpq's default port for each host
    }
    mixed = driver_args("postgresql://u@db1:6432,db2/inbox")
    assert (mixed["host"], mixed["port"]) == ("db1,db2", "6432,")


def test_ipv6_hosts_lose_their_brackets():
    got = driver_args("postgresql://u@[::1]:5432,[fe80::2]/inbox")
    assert (got["host"], got["port"]) == ("::1,fe80::2", "5432,")


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg"])
def test_every_scheme_spelling_becomes_the_psycopg_driver(scheme):
    assert sqlalchemy_url(f"{scheme}://u@h1,h2/db").startswith("postgresql+psycopg://u@/db?")
    assert sqlalchemy_url(f"{scheme}://u@h/db") == "postgresql+psycopg://u@h/db"


def test_a_single_host_url_is_unchanged_but_for_the_driver():
    url = "postgresql://u:p@127.0.0.1:5432/inbox?sslmode=require"
    assert sqlalchemy_url(url) == "postgresql+psycopg://u:p@127.0.0.1:5432/inbox?sslmode=require"


def test_a_list_without_a_database_name_still_parses():
    assert driver_args("postgresql://u@h1,h2")["host"] == "h1,h2"


def test_hosts_named_twice_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="names its hosts twice"):
        sqlalchemy_url("postgresql://u@h1,h2/db?host=h3")


def test_a_port_that_is_not_a_number_is_refused_naming_the_host():
    with pytest.raises(ValueError, match="'h2' is not a number"):
        sqlalchemy_url("postgresql://u@h1:5432,h2:five/db")
