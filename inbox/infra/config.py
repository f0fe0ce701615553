"""Configuration, read once from the environment.

Each setting is a field of ``Settings`` declared with ``setting(ENV, default, doc)``: its
environment variable, its default and a one-line description, written once. ``from_env``
reads the variables from those declarations; ``settings()`` does it once per process, and is
how every other module gets them (``reload()`` reads again, for tests). The configuration reference
(``docs/reference/configuration.md``) is generated from the same declarations when the
docs are built.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

_TRUE = {"1", "true", "yes", "on"}


def _modules(raw: str) -> tuple[str, ...]:
    return tuple(m.strip() for m in raw.split(",") if m.strip())


def setting(
    env: str,
    default: Any,
    doc: str,
    *,
    parse: Callable[[str], Any] | None = None,
    shown: str | None = None,
    secret: bool = False,
) -> Any:
    """A field of ``Settings`` read from ``env``; ``doc`` is its line in the reference.

    ``parse`` turns the variable's text into the value (by default: from the default's
    type); ``shown`` is how the reference shows a default that is not a plain value; a
    ``secret`` is left out of the settings' repr.
    """
    return field(
        default=default,
        repr=not secret,
        metadata={"env": env, "doc": doc, "parse": parse, "shown": shown},
    )


class Documented(NamedTuple):
    """One setting as the reference shows it."""

    name: str  # the field's name
    env: str
    default: str
    doc: str


@dataclass(frozen=True)
class Settings:
    database_url: str = setting(
        "DATABASE_URL",
        "",
        "PostgreSQL URL (libpq multi-host URLs work); `make run` starts an embedded one",
        shown="embedded under `make run`",
    )
    db_pooler: str = setting(
        "INBOX_DB_POOLER",
        "",
        "`transaction`: behind PgBouncer in transaction mode (no startup options, no "
        "prepared statements, the timeouts set in every transaction; docs/ha.md)",
        parse=lambda raw: raw.strip().lower(),
        shown="none (a direct connection)",
    )
    migrate_database_url: str = setting(
        "INBOX_MIGRATE_DATABASE_URL",
        "",
        "a direct PostgreSQL URL (past a pooler) for `inbox migrate`, `make run`'s migrations"
        " and, with `INBOX_DB_POOLER=transaction`, the web's LISTEN for `Prefer: wait`",
        shown="the value of `DATABASE_URL`",
    )
    redis_url: str = setting(
        "REDIS_URL",
        "",
        "Redis: the doorbell flag and rate limits, and the broker unless `BROKER_URL` is set",
        shown="embedded under `make run`",
    )
    broker_url: str = setting(
        "BROKER_URL",
        "",
        "Celery broker, e.g. `amqp://guest:guest@127.0.0.1:5672//`",
        shown="the value of `REDIS_URL`",
    )
    broker_queues: str = setting(
        "INBOX_BROKER_QUEUES",
        "classic",
        "`quorum`: RabbitMQ quorum queues, with what Celery needs with them (docs/ha.md)",
        parse=lambda raw: raw.strip().lower(),
    )
    max_body_bytes: int = setting(
        "INBOX_MAX_BODY_BYTES", 1024 * 1024, "default body limit (per source: `max_body_bytes`)"
    )
    key_ttl_hours: int = setting(
        "INBOX_KEY_TTL_HOURS", 24, "how long a dedup key is kept (per source: `key_ttl_hours`)"
    )
    db_timeout_ms: int = setting(
        "INBOX_DB_TIMEOUT_MS",
        2000,
        "statement and lock timeout; the receiver's deadline for all of a request's "
        "database waits, past which it answers 503",
    )
    pool_size: int = setting("INBOX_DB_POOL_SIZE", 10, "database connections per web process")
    claim_statements: int = setting(
        "INBOX_CLAIM_STATEMENTS",
        1,
        "group-commit statements one web process may have out at once",
    )
    sweep_seconds: int = setting(
        "INBOX_SWEEP_SECONDS",
        30,
        "the lifeline's interval: expired leases requeued, due events and deliveries re-rung",
    )
    lease_seconds: int = setting(
        "INBOX_LEASE_SECONDS",
        60,
        "lease length; renewed at each step commit and by a heartbeat during a long step",
    )
    batch_size: int = setting("INBOX_BATCH_SIZE", 100, "events per claim")
    drain_linger_ms: int = setting(
        "INBOX_DRAIN_LINGER_MS",
        50,
        "after a claim that found events, a drain claims again this much later, so a steady "
        "stream is taken several events a claim by one task (0: at once)",
    )
    step_concurrency: int = setting(
        "INBOX_STEP_CONCURRENCY",
        16,
        "steps with an outside effect one worker process runs at once (threads), across a "
        "claimed batch; 1 runs them one after another. Such steps must be thread-safe",
    )
    retry_base_seconds: float = setting(
        "INBOX_RETRY_BASE_SECONDS",
        2.0,
        "first retry delay (doubles, with jitter, capped at 1 h)",
    )
    playbook_modules: tuple[str, ...] = setting(
        "INBOX_PLAYBOOKS",
        (),
        "comma-separated modules that register playbooks, imported by every process",
        parse=_modules,
        shown="none",
    )
    allow_private_targets: bool = setting(
        "INBOX_ALLOW_PRIVATE_TARGETS",
        False,
        "let callbacks reach loopback and private addresses (`make run` turns it on)",
    )
    log_level: str = setting("INBOX_LOG_LEVEL", "INFO", "level of the JSON logs on stderr")
    secret_key: str = setting(
        "INBOX_SECRET_KEY",
        "",
        "not needed: console sessions are held in the database; read for compatibility only",
    )
    bulk_approval_min: int = setting(
        "INBOX_BULK_APPROVAL_MIN",
        100,
        "a bulk replay matching more events than this waits for a second operator's approval",
    )
    circuit_failures: int = setting(
        "INBOX_CIRCUIT_FAILURES",
        3,
        "consecutive retryable failures (5xx, 408, 429, timeouts, refused connections) that "
        "open an endpoint's circuit: then one probe at a time, not one attempt per delivery; "
        "keep it below the endpoints' attempt budgets (4 by default): an unreachable endpoint "
        "is tried one delivery per round, so its oldest one spends its attempts first",
    )
    circuit_probe_max_seconds: float = setting(
        "INBOX_CIRCUIT_PROBE_MAX_SECONDS",
        5.0,
        "the longest wait between two probes of an open circuit (doubling from 1 s, with "
        "±20 % jitter); a Retry-After is honoured up to 300 s",
    )
    circuit_failure_rate: float = setting(
        "INBOX_CIRCUIT_FAILURE_RATE",
        0.5,
        "the share of retryable failures over INBOX_CIRCUIT_WINDOW_SECONDS that opens an "
        "endpoint's circuit too (at or above it), once INBOX_CIRCUIT_MIN_ATTEMPTS attempts "
        "fell in the window: an endpoint failing every other time is never N in a row; "
        "0 turns it off",
    )
    circuit_window_seconds: float = setting(
        "INBOX_CIRCUIT_WINDOW_SECONDS",
        60.0,
        "the failure rate's window, kept in six slices on the endpoint's row; it starts at a "
        "failure (successes before the first failure in it are not counted)",
    )
    circuit_min_attempts: int = setting(
        "INBOX_CIRCUIT_MIN_ATTEMPTS",
        20,
        "attempts in the window before its failure rate can open the circuit",
    )
    held_discard_approval_min: int = setting(
        "INBOX_HELD_DISCARD_APPROVAL_MIN",
        100,
        "discarding more of an endpoint's held deliveries than this waits for a second "
        "operator's approval",
    )
    lane_skip_approval_above: int = setting(
        "INBOX_LANE_SKIP_APPROVAL_ABOVE",
        100,
        "skipping a quarantined event that blocks its ordered lane takes a second operator's"
        " confirmation when more events than this wait behind it",
    )
    kek: str = setting(
        "INBOX_KEK",
        "",
        "comma-separated Fernet keys that encrypt the signing secrets, newest first; the same "
        "in every process (`inbox secrets keygen` makes one)",
        shown="none (required where signing secrets exist)",
        secret=True,
    )
    encrypt_payloads: bool = setting(
        "INBOX_ENCRYPT_PAYLOADS",
        True,
        "seal raw bodies and stored headers under per-tenant (or per-subject) data keys"
        " wrapped by INBOX_KEK; takes effect where INBOX_KEK is set (0: store new ones in clear)",
    )
    keystore_url: str = setting(
        "INBOX_KEYSTORE_URL",
        "",
        "PostgreSQL URL of the key store: a small database of its own that holds the payloads'"
        " wrapped data keys, apart from DATABASE_URL, so a dump of the inbox's database holds"
        " no key (docs/explanation/security.md); sealing is off while it is unset;"
        " `make run` makes one beside its database",
        shown="none (sealing off); `make run`: a database `inbox_keys` beside its own",
    )
    data_key_cache: int = setting(
        "INBOX_DATA_KEY_CACHE",
        4096,
        "unwrapped data keys a process keeps (least recently used dropped first)",
    )
    data_key_ttl_s: float = setting(
        "INBOX_DATA_KEY_TTL_S",
        60.0,
        "seconds a process keeps an unwrapped data key; an erased key may seal a payload"
        " for at most this long after the erasure in a process that had it",
    )
    public_url: str = setting(
        "INBOX_PUBLIC_URL",
        "",
        "the address the CLI prints for sources; https makes the console cookie `Secure`",
        shown="`http://127.0.0.1:8000` for the CLI",
    )
    metrics_token: str = setting(
        "INBOX_METRICS_TOKEN", "", "when set, `/metrics` needs `Authorization: Bearer <it>`"
    )
    cookie_secure: bool | None = setting(
        "INBOX_COOKIE_SECURE",
        None,
        "1: the console cookie is `Secure` (with the `__Host-` prefix); 0: never",
        parse=lambda raw: raw.strip().lower() in _TRUE,
        shown="from `INBOX_PUBLIC_URL`",
    )
    session_idle_minutes: int = setting(
        "INBOX_SESSION_IDLE_MINUTES", 30, "a console session ends after this long without a request"
    )
    session_hours: int = setting(
        "INBOX_SESSION_HOURS", 12, "a console session ends this long after sign-in, however busy"
    )
    auth_max_failures: int = setting(
        "INBOX_AUTH_MAX_FAILURES",
        10,
        "failed sign-ins and bearer tokens per client address per window before 429 (0: off)",
    )
    auth_window_seconds: int = setting(
        "INBOX_AUTH_WINDOW_SECONDS", 300, "the window of `INBOX_AUTH_MAX_FAILURES`"
    )
    max_backlog: int = setting(
        "INBOX_MAX_BACKLOG",
        0,
        "events received or processing past which new events get 503 + `Retry-After` (0: off)",
    )
    trusted_proxies: int = setting(
        "INBOX_TRUSTED_PROXIES",
        0,
        "reverse proxies in front that append to `X-Forwarded-For`",
    )
    ledger_retention_days: int = setting(
        "INBOX_LEDGER_RETENTION_DAYS",
        365,
        "days of the ledger kept before a whole day is dropped (never shorter than the "
        "longest key window in use)",
    )
    evidence_key_file: str = setting(
        "INBOX_EVIDENCE_KEY_FILE",
        "",
        "the Ed25519 private key (PEM, made by `inbox evidence keygen`) that signs exported "
        "evidence bundles; `inbox events export` refuses to run without it",
    )

    require_database_at_start: bool = setting(
        "INBOX_REQUIRE_DATABASE_AT_START",
        False,
        "`true`: a process whose database does not answer at start exits (69) in one line; "
        "by default it starts and waits, `/readyz` saying `database`",
    )
    metrics_tenant_labels: bool = setting(
        "INBOX_METRICS_TENANT_LABELS",
        True,
        "`false`: every `tenant` label of the metrics is empty",
        parse=lambda raw: raw.strip().lower() not in {"0", "false", "no", "off"},
    )
    metrics_dir: str = setting(
        "PROMETHEUS_MULTIPROC_DIR",
        "",
        "shared metrics directory: the same one for the web and Celery processes of a host "
        "gives one `/metrics` for both (prometheus_client reads it too)",
        shown="a private temporary directory",
    )
    # The web process (web/serve.py, web/keepalive.py); its flags override them.
    web_host: str = setting("WEB_HOST", "0.0.0.0", "the address the web server binds")
    port: int = setting("PORT", 8000, "the port the web server listens on")
    web_concurrency: int = setting(
        "WEB_CONCURRENCY", 0, "web worker processes (0: one per core)", shown="one per core"
    )
    web_threads: int = setting(
        "WEB_THREADS",
        24,
        "threads per web worker; a process's claims use connections of their own beside "
        "the pool, so `INBOX_DB_POOL_SIZE` may be smaller",
    )
    web_backlog: int = setting("WEB_BACKLOG", 2048, "the listening socket's backlog")
    web_graceful_timeout: int = setting(
        "WEB_GRACEFUL_TIMEOUT", 30, "seconds a web worker has to finish its requests at shutdown"
    )
    keepalive_requests: int = setting(
        "WEB_KEEPALIVE_REQUESTS",
        100,
        "each answer closes its keep-alive connection with probability 1/n, so connections "
        "re-spread over the workers (0: never)",
    )
    # OpenTelemetry (inbox.infra.tracing, docs/tracing.md): these two decide whether tracing
    # starts; the SDK reads every other OTEL_* variable itself.
    traces_exporter: str = setting(
        "OTEL_TRACES_EXPORTER",
        "",
        "`otlp`, `console` or both: OpenTelemetry traces (docs/tracing.md); unset or `none`: off",
        shown="none (off)",
    )
    otlp_protocol: str = setting(
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "",
        "the OTLP protocol: `http/protobuf`, the one supported",
        shown="`http/protobuf`",
    )
    otlp_traces_protocol: str = setting(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "",
        "the OTLP protocol for traces alone (over `OTEL_EXPORTER_OTLP_PROTOCOL`)",
        shown="`OTEL_EXPORTER_OTLP_PROTOCOL`",
    )

    @property
    def migration_url(self) -> str:
        """Where the migrations run: INBOX_MIGRATE_DATABASE_URL, else DATABASE_URL."""
        return self.migrate_database_url or self.database_url

    @property
    def public_base(self) -> str:
        """The address the CLI prints: INBOX_PUBLIC_URL, else this host's port."""
        return (self.public_url or f"http://127.0.0.1:{self.port}").rstrip("/")

    @property
    def secure_cookie(self) -> bool:
        if self.cookie_secure is not None:
            return self.cookie_secure
        return self.public_url.lower().startswith("https://")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings ``environ`` (by default the process environment) says. Code outside
        this module calls ``settings()``, which reads the environment once
        (tests/unit/test_settings_once.py)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            name: str = f.metadata.get("env", "")
            raw = env.get(name, "") if name else ""
            if raw != "":
                values[f.name] = _parse(f.metadata.get("parse"), f.default, name, raw)
        if not values.get("broker_url"):
            values["broker_url"] = values.get("redis_url", cls.redis_url)
        return cls(**values)


_loaded: Settings | None = None
_loading = threading.Lock()


def settings() -> Settings:
    """This process's settings, read from the environment on first use and kept: the one
    way code gets them (a running process's environment does not change from outside, so
    a change to a variable, ``INBOX_KEK`` included, takes a restart)."""
    found = _loaded
    if found is not None:
        return found
    with _loading:
        return _loaded if _loaded is not None else _read()


def reload() -> Settings:
    """Read the environment again: for tests, which change it, and for ``export``."""
    with _loading:
        return _read()


def _read() -> Settings:
    global _loaded
    _loaded = Settings.from_env()
    return _loaded


def export(name: str, value: str) -> None:
    """Set ``name`` for what reads the environment after this process does: the server's
    worker processes, prometheus_client. The settings are read again."""
    os.environ[name] = value
    reload()


def drop_variables(prefixes: tuple[str, ...]) -> None:
    """Remove the variables whose names start with one of ``prefixes`` (granian builds each
    request's WSGI environ from a copy of the process environment)."""
    for name in [n for n in os.environ if n.startswith(prefixes)]:
        del os.environ[name]
    reload()


def _parse(parse: Callable[[str], Any] | None, default: Any, name: str, raw: str) -> Any:
    if parse is not None:
        return parse(raw)
    if isinstance(default, bool):
        return raw.strip().lower() in _TRUE
    if isinstance(default, int | float):
        try:
            return type(default)(raw)
        except ValueError:
            kind = "an integer" if isinstance(default, int) else "a number"
            raise ValueError(f"{name}={raw!r} is not {kind}") from None
    return raw


def documented() -> Iterator[Documented]:
    """Every setting, in declaration order, as the configuration reference shows it."""
    for f in fields(Settings):
        meta = f.metadata
        if "env" not in meta:
            continue
        shown = meta.get("shown")
        if shown is None:
            shown = "none" if f.default in ("", None) else f"`{f.default}`"
            if isinstance(f.default, bool):
                shown = "`1`" if f.default else "`0`"
        yield Documented(f.name, meta["env"], shown, meta["doc"])


def undocumented() -> list[str]:
    """Fields of ``Settings`` declared without ``setting(ENV, default, doc)``."""
    return [f.name for f in fields(Settings) if not f.metadata.get("doc")]
