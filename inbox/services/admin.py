"""Who may call, and what is configured: tokens, console sessions, sign-in throttling,
tenants and sources, and the stored secrets' key.

One implementation behind the admin API, the console and the CLI (``inbox.services.operations``
holds what operators do to events, deliveries, holds and endpoints).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from inbox.domain.errors import NotFound
from inbox.domain.records import Source, Tenant
from inbox.domain.sources import SourceOptions
from inbox.domain.tokens import Token
from inbox.infra.keyring import Keyring
from inbox.services.runtime import Runtime
from inbox.store.db.errors import wrap_exceptions
from inbox.store.reads import sources as source_reads
from inbox.store.reads import tokens as token_reads
from inbox.store.write import secrets as secret_store
from inbox.store.write import sessions as session_store
from inbox.store.write import sources as source_store
from inbox.store.write import throttle as throttle_store
from inbox.store.write import tokens as token_store
from inbox.store.write.secrets import Reencrypted
from inbox.store.write.sessions import StoredSession

__all__ = [
    "Reencrypted",
    "StoredSession",
    "Token",
    "add_source_secret",
    "authenticate",
    "blocked_for",
    "check_named",
    "create_session",
    "create_source",
    "create_tenant",
    "create_token",
    "delete_session",
    "get_source",
    "keep_source_secret",
    "list_sources",
    "list_tenants",
    "list_tokens",
    "load_session",
    "record_failure",
    "reencrypt",
    "revoke_token",
    "save_session",
    "set_source_enabled",
    "update_source",
]


# Tokens.


def authenticate(rt: Runtime, raw: str) -> Token | None:
    """The live token whose digest this is (its last use is recorded), else None."""
    with rt.engine.begin() as conn:
        return token_store.authenticate(conn, raw)


def create_token(rt: Runtime, name: str, role: str, tenant: str | None = None) -> tuple[Token, str]:
    """A new token and its clear value (shown once: only its digest is kept)."""
    with rt.engine.begin() as conn:
        return token_store.create_token(conn, name, role, tenant)


def list_tokens(rt: Runtime) -> list[Token]:
    with rt.engine.connect() as conn:
        return token_reads.list_tokens(conn)


def revoke_token(rt: Runtime, name: str) -> bool:
    """Revoke a live token at once; False when none has that name."""
    with rt.engine.begin() as conn:
        return token_store.revoke(conn, name)


# Console sessions, held on the server (``web/ui/security.py`` says why).


def load_session(
    rt: Runtime, sid: str, idle_seconds: int, max_seconds: int
) -> tuple[StoredSession, Token] | None:
    """A live session and its live token, else None (expired, signed out, revoked)."""
    with rt.engine.connect() as conn:
        stored = session_store.load(conn, sid, idle_seconds, max_seconds)
        token = token_reads.get_token(conn, stored.token_id) if stored is not None else None
    if stored is None or token is None or token.revoked_at is not None:
        return None
    return stored, token


def create_session(
    rt: Runtime, token_id: int, data: dict[str, Any], idle_seconds: int, max_seconds: int
) -> tuple[str, int]:
    """A new session (its id, its row id) after removing the expired ones."""
    with rt.engine.begin() as conn:
        session_store.prune(conn, idle_seconds, max_seconds)
        return session_store.create(conn, token_id, data)


def save_session(rt: Runtime, row_id: int, data: dict[str, Any] | None, touch: bool) -> None:
    """Raises the store's own errors (``StoreUnavailable``, ``ValueRefused``): the console
    saves after its page is rendered, and a session not saved is no outage."""
    with wrap_exceptions(), rt.engine.begin() as conn:
        session_store.save(conn, row_id, data, touch=touch)


def delete_session(rt: Runtime, row_id: int) -> None:
    """Sign out: the session's row goes, and every copy of its cookie stops working."""
    with rt.engine.begin() as conn:
        session_store.delete(conn, row_id)


# Failed sign-ins per client address (``web/throttle.py``).


def blocked_for(rt: Runtime, kind: str, client: str, limit: int, window: int) -> int:
    """Seconds until ``client`` may try ``kind`` again (0: it may now)."""
    with rt.engine.connect() as conn:
        return throttle_store.blocked_for(conn, kind, client, limit, window)


def record_failure(rt: Runtime, kind: str, client: str, window: int) -> int:
    """Count one failure; returns the failures in the current window."""
    with rt.engine.begin() as conn:
        return throttle_store.record_failure(conn, kind, client, window)


# Tenants and sources.


def create_tenant(rt: Runtime, name: str) -> Tenant:
    with rt.engine.begin() as conn:
        return source_store.create_tenant(conn, name)


def set_fairness(
    rt: Runtime,
    name: str,
    max_in_flight: int | None = None,
    weight: int | None = None,
    *,
    no_cap: bool = False,
) -> Tenant:
    """A tenant's in-flight cap and claim weight (``inbox tenants set``, the tenants API)."""
    with rt.engine.begin() as conn:
        return source_store.set_fairness(conn, name, max_in_flight, weight, no_cap=no_cap)


def tenant_settings(rt: Runtime, name: str | None = None) -> list[Tenant]:
    """Tenants (or the one named) with their in-flight cap and weight."""
    with rt.engine.connect() as conn:
        return source_reads.tenant_settings(conn, name)


def list_tenants(rt: Runtime) -> list[Tenant]:
    with rt.engine.connect() as conn:
        return source_reads.list_tenants(conn)


def check_named(conn: Connection, tenant: str | None, source: str | None = None) -> None:
    """A tenant or source named as a filter must exist: a typo is an error, not ``(none)``."""
    if tenant is not None:
        source_reads.get_tenant(conn, tenant)
    if source is not None:
        if tenant is not None:
            source_reads.get_source(conn, tenant, source)
        elif not any(s.name == source for s in source_reads.list_sources(conn)):
            raise NotFound(f"No source {source!r} for any tenant.")


def list_sources(rt: Runtime, tenant: str | None = None) -> list[Source]:
    with rt.engine.connect() as conn:
        check_named(conn, tenant)
        return source_reads.list_sources(conn, tenant)


def get_source(rt: Runtime, tenant: str, name: str) -> Source:
    with rt.engine.connect() as conn:
        return source_reads.get_source(conn, tenant, name)


def create_source(
    rt: Runtime,
    tenant: str,
    name: str,
    scheme: str,
    secrets: list[str],
    options: SourceOptions,
) -> Source:
    with rt.engine.begin() as conn:
        return source_store.create_source(conn, tenant, name, scheme, secrets, options)


def update_source(
    rt: Runtime,
    tenant: str,
    name: str,
    changes: dict[str, object],
    unset: tuple[str, ...] = (),
    enabled: bool | None = None,
    check_playbook: Callable[[str | None], None] | None = None,
) -> Source:
    """Merge ``changes`` into the source's options (``unset`` ones back to their
    defaults), validated as at create; a new playbook is checked with ``check_playbook``."""
    with rt.engine.begin() as conn:
        src = source_reads.get_source(conn, tenant, name)
        merged = {k: v for k, v in src.options.to_dict().items() if k not in unset}
        merged.update(changes)
        new = SourceOptions.from_dict(merged)
        if new.playbook != src.options.playbook and check_playbook is not None:
            check_playbook(new.playbook)
        if new != src.options:
            source_store.set_options(conn, src, new)
        if enabled is not None and enabled != src.enabled:
            source_store.set_enabled(conn, src, enabled)
        return source_reads.get_source(conn, src.tenant, src.name)


def add_source_secret(rt: Runtime, tenant: str, name: str, make: Callable[[Source], str]) -> str:
    """Add the secret ``make(source)`` returns; both verify during the overlap. Returns it."""
    with rt.engine.begin() as conn:
        src = source_reads.get_source(conn, tenant, name)
        secret = make(src)
        source_store.add_secret(conn, src, secret)
    return secret


def keep_source_secret(rt: Runtime, tenant: str, name: str, keep: str) -> int:
    """End the overlap: revoke every secret but ``keep``; returns how many."""
    with rt.engine.begin() as conn:
        src = source_reads.get_source(conn, tenant, name)
        return source_store.revoke_secrets_except(conn, src, keep)


def set_source_enabled(rt: Runtime, tenant: str, name: str, enabled: bool) -> None:
    """Accept events, or not (the URL answers 404)."""
    with rt.engine.begin() as conn:
        source_store.set_enabled(conn, source_reads.get_source(conn, tenant, name), enabled)


# The stored secrets' key.


def reencrypt(rt: Runtime, ring: Keyring) -> list[Reencrypted]:
    """Every stored secret, revoked ones too, under the newest key of ``ring``."""
    with rt.engine.begin() as conn:
        return secret_store.reencrypt(conn, ring)
