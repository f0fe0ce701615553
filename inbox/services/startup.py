"""What a process checks before it starts work: it stops at once, in one line that names
the setting and the fix, when it could not do its job.

- a module of ``INBOX_PLAYBOOKS`` that does not import (``inbox.services.playbooks``);
- signing secrets stored encrypted while ``INBOX_KEK`` is not set (or is not a key): every
  event would be answered 503, every callback left unsigned;
- with ``INBOX_REQUIRE_DATABASE_AT_START`` set, a database that does not answer. By default
  a process starts without it and waits (``/readyz`` says ``database``), so the order in
  which a supervisor starts things does not matter.

A key that is set but does not decrypt the stored secrets is not a reason to stop: a
rotation may be half done; ``/readyz`` says ``secrets`` (``secrets_problem``).
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection, Engine

from inbox.domain.errors import InboxError
from inbox.infra import keyring as kr
from inbox.infra.config import Settings
from inbox.services import playbooks
from inbox.store.db import availability
from inbox.store.db.engine import make_engine
from inbox.store.reads import secrets as secret_reads

log = logging.getLogger(__name__)
REQUIRE_DATABASE = "INBOX_REQUIRE_DATABASE_AT_START"


# Exit statuses, as sysexits.h names them: a supervisor (systemd's
# RestartPreventExitStatus=78) need not restart a process whose configuration is wrong.
EX_UNAVAILABLE = 69  # the database does not answer (INBOX_REQUIRE_DATABASE_AT_START)
EX_CONFIG = 78  # a setting is missing or wrong: restarting will not help


class CannotStart(InboxError):
    """The one line a process says before it exits non-zero, and the status to exit with."""

    def __init__(self, message: str, exit_code: int = EX_CONFIG) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def check(settings: Settings, engine: Engine | None = None) -> None:
    """Raise ``CannotStart`` when this process cannot do its job; else return."""
    try:
        playbooks.load(settings.playbook_modules)
    except playbooks.CannotLoad as exc:
        raise CannotStart(str(exc)) from None
    ring: kr.Keyring | None = None
    if kr.configured():
        try:
            ring = kr.keyring()
        except ValueError as exc:
            raise CannotStart(f"{kr.ENV} is not a list of keys: {exc}") from None
    if not settings.database_url:
        raise CannotStart("DATABASE_URL is not set: export it (postgresql://USER@HOST/DB)")
    if settings.encrypt_payloads and ring is not None and not settings.keystore_url:
        log.warning(
            "INBOX_KEYSTORE_URL is not set: new payloads are stored in clear (sealing needs"
            " the key store, docs/how-to/deploy.md#the-key-store)"
        )
    own = engine is None
    eng = engine or make_engine(settings, pool_size=1)
    try:
        try:
            with eng.connect() as conn:
                count = secret_reads.encrypted_count(conn)
        except Exception as exc:
            reason = availability.refusal(exc)
            fix = availability.remedy(reason) if reason else None
            if settings.require_database_at_start:
                raise CannotStart(_stop_line(exc, reason, fix), EX_UNAVAILABLE) from None
            if reason:
                log.warning(
                    "the database refuses the connection (%s): %s; starting anyway, /readyz"
                    " says so until it accepts (set %s to stop instead)",
                    reason,
                    fix or "it may be starting up or full: it is tried again",
                    REQUIRE_DATABASE,
                )
            else:
                log.warning(
                    "the database does not answer yet (%s); starting anyway, /readyz says so"
                    " until it does (set %s to stop instead)",
                    type(exc).__name__,
                    REQUIRE_DATABASE,
                )
            return
    finally:
        if own:
            eng.dispose()
    if count is None:
        log.warning("the schema is not migrated yet: run inbox migrate (/readyz says schema)")
        return
    if count and ring is None:
        raise CannotStart(
            f"{kr.ENV} is not set, yet {_secrets(count)} stored encrypted:"
            f" set {kr.ENV} to the key they were stored with, the same in every process"
            " (for a new installation, `inbox secrets keygen` prints one)"
        )


def _stop_line(exc: Exception, reason: str | None, fix: str | None) -> str:
    """The exit-69 line: the server's reason when it gave one, and what to change."""
    if reason is None:
        first = " ".join(str(exc).split())[:200] or type(exc).__name__
        return (
            f"the database does not answer ({first}) and {REQUIRE_DATABASE} is set:"
            f" start the database first, or unset {REQUIRE_DATABASE} to wait for it"
        )
    then = fix or "wait until it accepts connections"
    return (
        f"the database refuses the connection: {reason}; {then}"
        f" ({REQUIRE_DATABASE} is set: unset it to start anyway and wait)"
    )


def secrets_problem(conn: Connection) -> str | None:
    """Why the stored signing secrets cannot be used now, or None: for ``/readyz``."""
    sample = secret_reads.sample(conn)
    if not sample:
        return None
    if not kr.configured():
        return f"{kr.ENV} is not set; the stored signing secrets cannot be decrypted"
    try:
        ring = kr.keyring()
    except ValueError:
        return f"{kr.ENV} is not a list of keys"
    failing = 0
    for value in sample:
        try:
            ring.decrypt(value)
        except kr.KeyInvalid:
            failing += 1
    if failing:
        which = (
            "the newest signing secret does"
            if len(sample) == 1
            else (f"{failing} of the {len(sample)} newest signing secrets do")
        )
        return f"{which} not decrypt with {kr.ENV}: set the key they were stored with"
    return None


def _secrets(count: int) -> str:
    return "1 signing secret is" if count == 1 else f"{count} signing secrets are"
