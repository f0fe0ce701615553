"""Which errors are a database outage, and the one line per outage a process logs."""

from __future__ import annotations

import logging
import time

import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg import errors as pgerrors
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from inbox.services.outages import Outages
from inbox.store.db.availability import refusal, remedy, unavailable, unreachable


def wrapped(orig: Exception, invalidated: bool = False) -> OperationalError:
    """A driver error as SQLAlchemy raises it."""
    return OperationalError("SELECT 1", {}, orig, connection_invalidated=invalidated)


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (
            wrapped(pgerrors.AdminShutdown("terminating connection due to administrator command")),
            "AdminShutdown: terminating connection due to administrator command",
        ),
        (
            psycopg.OperationalError('connection failed: server at "h1" failed\nmore'),
            'OperationalError: connection failed: server at "h1" failed',
        ),
        (pgerrors.CannotConnectNow("the database system is starting up"), "CannotConnectNow: "),
        (PoolTimeout("QueuePool limit of size 5 overflow 0 reached"), "PoolTimeout: "),
        (
            pgerrors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"),
            "read-only: cannot execute INSERT",
        ),
        (wrapped(RuntimeError("socket closed"), invalidated=True), "RuntimeError: socket closed"),
    ],
)
def test_an_unreachable_or_read_only_database_is_an_outage(error, cause):
    found = unavailable(error)
    assert found is not None and found.startswith(cause)
    assert "\n" not in found


@pytest.mark.parametrize(
    "error",
    [
        pgerrors.QueryCanceled("canceling statement due to statement timeout"),
        pgerrors.LockNotAvailable("canceling statement due to lock timeout"),
        IntegrityError("INSERT", {}, pgerrors.UniqueViolation("duplicate key")),
        ValueError("a bug"),
    ],
)
def test_a_slow_statement_or_a_bug_is_not_an_outage(error):
    assert unavailable(error) is None


def outages_counted() -> float:
    return REGISTRY.get_sample_value("inbox_database_outages_total") or 0.0


def test_one_warning_and_one_count_per_outage(caplog):
    caplog.set_level(logging.INFO, logger="inbox.services.outages")
    watch = Outages()
    before = outages_counted()
    down = wrapped(pgerrors.AdminShutdown("terminating connection due to administrator command"))
    assert all(watch.absorb(down) for _ in range(5))
    assert watch.absorb(ValueError("a bug")) is False  # not ours to swallow
    watch.answered(time.monotonic())
    watch.answered(time.monotonic())
    assert watch.absorb(psycopg.OperationalError("connection refused"))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines[0] == (
        "WARNING",
        "database unavailable: AdminShutdown: terminating connection due to administrator"
        " command; retrying",
    )
    assert lines[1][0] == "INFO" and lines[1][1].startswith("database available again after ")
    assert lines[2] == (
        "WARNING",
        "database unavailable: OperationalError: connection refused; retrying",
    )
    assert len(lines) == 3
    assert not any(r.exc_info for r in caplog.records)  # no traceback
    assert outages_counted() - before == 2


def test_a_task_that_began_before_the_outage_does_not_end_it(caplog):
    """A courier's threads: one task fails as the primary goes, while another, begun
    before, finishes its last statement's answer. One failover, one WARNING, one INFO."""
    caplog.set_level(logging.INFO, logger="inbox.services.outages")
    watch = Outages()
    earlier = time.monotonic()
    assert watch.absorb(wrapped(pgerrors.AdminShutdown("unexpected postmaster exit")))
    watch.answered(earlier)  # began before the outage: says nothing of it
    assert watch.absorb(psycopg.OperationalError("server closed the connection"))
    watch.answered(time.monotonic())  # begun after: the database answers again
    levels = [r.levelname for r in caplog.records]
    assert levels == ["WARNING", "INFO"]


@pytest.mark.parametrize(
    ("said", "reason", "fix"),
    [
        (
            'connection failed: connection to server at "10.0.0.5", port 5432 failed: FATAL:  '
            'database "inbx" does not exist',
            'database "inbx" does not exist',
            "correct its name in DATABASE_URL",
        ),
        (
            'connection failed: connection to server at "db", port 5432 failed: FATAL:  '
            'password authentication failed for user "inbox"',
            'password authentication failed for user "inbox"',
            "correct the user or password",
        ),
        (
            'connection failed: connection to server at "db", port 5432 failed: FATAL:  '
            "sorry, too many clients already",
            "sorry, too many clients already",
            None,  # waiting cures it
        ),
    ],
)
def test_a_server_that_refuses_says_why_and_what_to_change(said, reason, fix):
    error = wrapped(psycopg.OperationalError(said))
    assert refusal(error) == reason
    assert unreachable(error) == f"refused: {reason}"  # /readyz: no address
    assert "10.0.0.5" not in unreachable(error)
    got = remedy(reason)
    assert (got is None) if fix is None else (got is not None and fix in got)


def test_nothing_answering_is_no_refusal():
    error = wrapped(
        psycopg.OperationalError(
            'connection failed: connection to server at "127.0.0.1", port 1 failed:'
            " Connection refused\n\tIs the server running on that host?"
        )
    )
    assert refusal(error) is None
    assert unreachable(error) == "unreachable: OperationalError"
