"""The schema, as SQLAlchemy Core tables. Migrations create exactly this; a test checks it.

Two modules hold them: ``config_tables`` (tenants, sources, endpoints, tokens, sessions,
audit, bulk replays: small) and ``ledger_tables`` (the dedup keys, and the tables
partitioned by day). Import them from here.
"""

from __future__ import annotations

from inbox.domain.states import DELIVERY_STATES, STATES
from inbox.store.schema.audit_tables import (
    callback_intents,
    invariant_repairs,
    invariant_violations,
    invariant_watermarks,
)
from inbox.store.schema.config_tables import (
    BULK_STATUSES,
    TOKEN_ROLES,
    api_tokens,
    audit_log,
    auth_failures,
    bulk_replay_items,
    bulk_replays,
    console_sessions,
    endpoint_secrets,
    endpoints,
    held_discards,
    legal_holds,
    source_secrets,
    sources,
    tenants,
)
from inbox.store.schema.key_tables import (
    ERASURE_STATUSES,
    data_keys,
    erasures,
    retention_reports,
    sealing_progress,
)
from inbox.store.schema.ledger_tables import (
    DROP_ORDER,
    PARTITIONED,
    deliveries,
    delivery_attempts,
    effects,
    event_attempts,
    event_keys,
    events,
    idempotency_conflicts,
    lane_blocks,
    ledger_floor,
    steps,
)
from inbox.store.schema.metadata import metadata

__all__ = [
    "BULK_STATUSES",
    "DELIVERY_STATES",
    "DROP_ORDER",
    "ERASURE_STATUSES",
    "PARTITIONED",
    "STATES",
    "TOKEN_ROLES",
    "api_tokens",
    "audit_log",
    "auth_failures",
    "bulk_replay_items",
    "bulk_replays",
    "callback_intents",
    "console_sessions",
    "data_keys",
    "deliveries",
    "delivery_attempts",
    "effects",
    "endpoint_secrets",
    "endpoints",
    "erasures",
    "event_attempts",
    "event_keys",
    "events",
    "held_discards",
    "idempotency_conflicts",
    "invariant_repairs",
    "invariant_violations",
    "invariant_watermarks",
    "lane_blocks",
    "ledger_floor",
    "legal_holds",
    "metadata",
    "retention_reports",
    "sealing_progress",
    "source_secrets",
    "sources",
    "steps",
    "tenants",
]
