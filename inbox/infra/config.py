"""Configuration, read once from the environment.

Every setting is documented in the README's configuration table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def _bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _optional_bool(name: str) -> bool | None:
    return _bool(name) if os.environ.get(name, "") != "" else None


@dataclass(frozen=True)
class Settings:
    database_url: str = ""
    redis_url: str = ""
    broker_url: str = ""
    max_body_bytes: int = 1024 * 1024
    key_ttl_hours: int = 24
    db_timeout_ms: int = 2000
    pool_size: int = 10
    claim_statements: int = 1
    sweep_seconds: int = 30
    lease_seconds: int = 60
    batch_size: int = 100
    retry_base_seconds: float = 2.0
    playbook_modules: tuple[str, ...] = field(default_factory=tuple)
    allow_private_targets: bool = False
    log_level: str = "INFO"
    secret_key: str = ""
    # The two-person rule: a bulk replay matching more events than this waits for approval.
    bulk_approval_min: int = 100
    public_url: str = ""
    # Security (issue #19): see the README's security section.
    metrics_token: str = ""
    cookie_secure: bool | None = None  # None: Secure when public_url is https
    session_idle_minutes: int = 30
    session_hours: int = 12
    auth_max_failures: int = 10
    auth_window_seconds: int = 300
    max_backlog: int = 0  # 0: no limit
    trusted_proxies: int = 0  # proxies in front that append to X-Forwarded-For
    # Days of the ledger kept before a whole day is dropped (inbox.domain.retention: never
    # shorter than the longest key window in use; stretched, and said so, if it is).
    ledger_retention_days: int = 365

    @property
    def secure_cookie(self) -> bool:
        if self.cookie_secure is not None:
            return self.cookie_secure
        return self.public_url.lower().startswith("https://")

    @classmethod
    def from_env(cls) -> Settings:
        redis_url = os.environ.get("REDIS_URL", "")
        return cls(
            database_url=os.environ.get("DATABASE_URL", ""),
            redis_url=redis_url,
            broker_url=os.environ.get("BROKER_URL", "") or redis_url,
            max_body_bytes=_int("INBOX_MAX_BODY_BYTES", 1024 * 1024),
            key_ttl_hours=_int("INBOX_KEY_TTL_HOURS", 24),
            db_timeout_ms=_int("INBOX_DB_TIMEOUT_MS", 2000),
            pool_size=_int("INBOX_DB_POOL_SIZE", 10),
            claim_statements=_int("INBOX_CLAIM_STATEMENTS", 1),
            sweep_seconds=_int("INBOX_SWEEP_SECONDS", 30),
            lease_seconds=_int("INBOX_LEASE_SECONDS", 60),
            batch_size=_int("INBOX_BATCH_SIZE", 100),
            retry_base_seconds=float(os.environ.get("INBOX_RETRY_BASE_SECONDS") or 2.0),
            playbook_modules=tuple(
                m.strip() for m in os.environ.get("INBOX_PLAYBOOKS", "").split(",") if m.strip()
            ),
            allow_private_targets=_bool("INBOX_ALLOW_PRIVATE_TARGETS"),
            log_level=os.environ.get("INBOX_LOG_LEVEL", "INFO"),
            secret_key=os.environ.get("INBOX_SECRET_KEY", ""),
            bulk_approval_min=_int("INBOX_BULK_APPROVAL_MIN", 100),
            public_url=os.environ.get("INBOX_PUBLIC_URL", ""),
            metrics_token=os.environ.get("INBOX_METRICS_TOKEN", ""),
            cookie_secure=_optional_bool("INBOX_COOKIE_SECURE"),
            session_idle_minutes=_int("INBOX_SESSION_IDLE_MINUTES", 30),
            session_hours=_int("INBOX_SESSION_HOURS", 12),
            auth_max_failures=_int("INBOX_AUTH_MAX_FAILURES", 10),
            auth_window_seconds=_int("INBOX_AUTH_WINDOW_SECONDS", 300),
            max_backlog=_int("INBOX_MAX_BACKLOG", 0),
            trusted_proxies=_int("INBOX_TRUSTED_PROXIES", 0),
            ledger_retention_days=_int("INBOX_LEDGER_RETENTION_DAYS", 365),
        )
