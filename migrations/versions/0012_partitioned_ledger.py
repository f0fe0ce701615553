"""the ledger at a year's scale: keys apart, events and deliveries partitioned by day

Revision ID: 0012_partitioned_ledger
Revises: 0011_console_sessions
Create Date: 2026-12-01

The dedup keys move to ``event_keys`` (small, pruned by expiry, the race decider); events,
steps, event_attempts, deliveries and delivery_attempts become tables partitioned by RANGE
on an id that carries its UTC day (``inbox.domain.ledger``). Existing rows are kept: an
event's new id is ``day(received_at) << 40 | old id`` (a delivery's, of created_at), every
reference is re-pointed through a map of old to new ids, live keys are copied into
event_keys with their duplicate counters, and a partition is made for every day present
and the week ahead, plus a DEFAULT partition per table.

The old tables are moved into a schema of their own (``inbox_0011``) while the new ones
are filled, so every index and constraint name is free for the new tables, then dropped.
The downgrade does the reverse, keeping every row (ids stay as they are now).

Partitions are hand-made (``inbox_create_partition``), not pg_partman: the embedded
PostgreSQL of ``make run`` (the pgserver wheel) has no extensions, and one SQL function
per day is all that is needed.
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0012_partitioned_ledger"
down_revision = "0011_console_sessions"
branch_labels = None
depends_on = None

TABLES = ("events", "steps", "event_attempts", "deliveries", "delivery_attempts")
AHEAD_DAYS = 7

# The day is the statement's (now() is the transaction's start): the id and received_at /
# created_at, both from now(), agree.
FUNCTIONS = """
CREATE FUNCTION inbox_ledger_id(seq regclass) RETURNS bigint
    LANGUAGE sql VOLATILE PARALLEL UNSAFE AS $$
    SELECT (floor(extract(epoch FROM now()) / 86400)::bigint << 40) | nextval(seq)
$$;

-- One day's partition of a ledger table (its name: inbox.domain.ledger.partition_name).
-- False when it exists already. Fails when the DEFAULT partition holds rows of that day:
-- inbox.store.schema.partitions moves them first.
CREATE FUNCTION inbox_create_partition(parent text, day date) RETURNS boolean
    LANGUAGE plpgsql AS $$
DECLARE
    lower bigint := (day - date '1970-01-01')::bigint << 40;
    name text := parent || '_p' || to_char(day, 'YYYYMMDD');
BEGIN
    IF to_regclass(name) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%s) TO (%s)',
                   name, parent, lower, lower + (1::bigint << 40));
    RETURN true;
END $$;
"""

SEQUENCES = (
    "events_id_seq",
    "event_attempts_id_seq",
    "deliveries_id_seq",
    "delivery_attempts_id_seq",
)

# The DDL, beside this file (package data): tables.py as it is at this revision, and the
# tables as 0011 had them (for the downgrade).
_HERE = Path(__file__).with_suffix("")
NEW_TABLES = _HERE.with_suffix(".up.sql").read_text()
OLD_TABLES = _HERE.with_suffix(".down.sql").read_text()

GUARDS = """
CREATE TRIGGER events_state_guard BEFORE UPDATE OF state ON events
    FOR EACH ROW EXECUTE FUNCTION inbox_guard_event_state();
CREATE TRIGGER deliveries_state_guard BEFORE UPDATE OF state ON deliveries
    FOR EACH ROW EXECUTE FUNCTION inbox_guard_delivery_state();
"""

EVENT_COLUMNS = (
    "id public_id tenant_id source_id key_digest event_type business_key_digest ordering_key"
    " content_type body body_sha256 headers response_status response_body sync state attempts"
    " max_attempts replay available_at lease_owner lease_expires_at fence received_at"
    " finished_at last_error_class last_error_message duplicate_count first_duplicate_at"
    " last_duplicate_at outcome decision duplicate_of occurred_at version newer_event_id"
).split()
STEP_COLUMNS = "event_id name result attempt replay completed_at".split()
EVENT_ATTEMPT_COLUMNS = (
    "event_id id at attempt step error_class error_message traceback outcome".split()
)
DELIVERY_COLUMNS = (
    "id public_id tenant_id endpoint_id event_id event_type body state replay attempts"
    " available_at lease_owner lease_expires_at fence last_status last_error created_at"
    " finished_at"
).split()
DELIVERY_ATTEMPT_COLUMNS = "delivery_id id at status error_class latency_ms excerpt".split()
KEY_COLUMNS = (
    "tenant_id source_id key_digest event_id public_id expires_at body_sha256"
    " response_status response_body sync duplicate_count first_duplicate_at last_duplicate_at"
).split()


def _copy(target: str, columns: list[str], source: str, exprs: dict[str, str]) -> None:
    """INSERT INTO ``target`` every row of ``source`` (aliased ``o``), each column as it
    was unless ``exprs`` says otherwise."""
    select = ", ".join(exprs.get(c, f"o.{c}") for c in columns)
    op.execute(f"INSERT INTO {target} ({', '.join(columns)}) SELECT {select} FROM {source}")


def _day(ts: str) -> str:
    return f"(floor(extract(epoch FROM {ts}) / 86400)::bigint << 40)"


def _create_partitions(days_sql: str) -> None:
    """A partition per table for each day ``days_sql`` yields, and the week ahead."""
    op.execute(
        f"""
        SELECT inbox_create_partition(t, d)
          FROM unnest(ARRAY{list(TABLES)}) AS t,
               (SELECT DISTINCT d FROM ({days_sql}
                 UNION SELECT CAST(now() AT TIME ZONE 'UTC' AS date) + g
                         FROM generate_series(0, {AHEAD_DAYS}) AS g) AS days(d)) AS days
        """
    )


def upgrade() -> None:
    op.execute("CREATE SCHEMA inbox_0011")
    # Cross-day references: no foreign key into the partitioned ledger (tables.py says why).
    op.execute("ALTER TABLE effects DROP CONSTRAINT fk_effects_event_id_events")
    op.execute(
        "ALTER TABLE idempotency_conflicts DROP CONSTRAINT fk_idempotency_conflicts_event_id_events"
    )
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} SET SCHEMA inbox_0011")
    op.execute(FUNCTIONS)
    for seq in SEQUENCES:
        op.execute(f"CREATE SEQUENCE {seq}")
    op.execute(NEW_TABLES)
    for seq in SEQUENCES:
        table = seq.removesuffix("_id_seq")
        op.execute(f"ALTER SEQUENCE {seq} OWNED BY {table}.id")
    for table in TABLES:
        op.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
    op.execute(GUARDS)

    # Old id -> new id: the old ids are far below 2**40, so day << 40 | old id is unique
    # and never equal to any old id (no re-pointing UPDATE can collide with a row's old value).
    op.execute(
        "CREATE TEMPORARY TABLE event_ids ON COMMIT DROP AS"
        f" SELECT id AS old, {_day('received_at')} | id AS new FROM inbox_0011.events"
    )
    op.execute(
        "CREATE TEMPORARY TABLE delivery_ids ON COMMIT DROP AS"
        f" SELECT id AS old, {_day('created_at')} | id AS new FROM inbox_0011.deliveries"
    )
    op.execute("ALTER TABLE event_ids ADD PRIMARY KEY (old)")
    op.execute("ALTER TABLE delivery_ids ADD PRIMARY KEY (old)")
    _create_partitions(
        "SELECT CAST(to_timestamp((new >> 40) * 86400) AT TIME ZONE 'UTC' AS date) FROM event_ids"
        " UNION SELECT CAST(to_timestamp((new >> 40) * 86400) AT TIME ZONE 'UTC' AS date)"
        " FROM delivery_ids"
    )

    keyed = "o.key_digest IS NOT NULL"
    _copy(
        "events",
        EVENT_COLUMNS,
        "inbox_0011.events o JOIN event_ids m ON m.old = o.id"
        " LEFT JOIN event_ids dup ON dup.old = o.duplicate_of"
        " LEFT JOIN event_ids newer ON newer.old = o.newer_event_id",
        {
            "id": "m.new",
            # While the key lives its counters are on event_keys (folded back when pruned).
            "duplicate_count": f"CASE WHEN {keyed} THEN 0 ELSE o.duplicate_count END",
            "first_duplicate_at": f"CASE WHEN {keyed} THEN NULL ELSE o.first_duplicate_at END",
            "last_duplicate_at": f"CASE WHEN {keyed} THEN NULL ELSE o.last_duplicate_at END",
            "duplicate_of": "coalesce(dup.new, o.duplicate_of)",
            "newer_event_id": "coalesce(newer.new, o.newer_event_id)",
        },
    )
    _copy(
        "event_keys",
        KEY_COLUMNS,
        "inbox_0011.events o JOIN event_ids m ON m.old = o.id WHERE o.key_digest IS NOT NULL",
        {"event_id": "m.new", "expires_at": "coalesce(o.key_expires_at, now())"},
    )
    _copy(
        "steps",
        STEP_COLUMNS,
        "inbox_0011.steps o JOIN event_ids m ON m.old = o.event_id",
        {"event_id": "m.new"},
    )
    _copy(
        "event_attempts",
        EVENT_ATTEMPT_COLUMNS,
        "inbox_0011.event_attempts o JOIN event_ids m ON m.old = o.event_id",
        {"event_id": "m.new"},
    )
    _copy(
        "deliveries",
        DELIVERY_COLUMNS,
        "inbox_0011.deliveries o JOIN delivery_ids m ON m.old = o.id"
        " LEFT JOIN event_ids ev ON ev.old = o.event_id",
        {"id": "m.new", "event_id": "coalesce(ev.new, o.event_id)"},
    )
    _copy(
        "delivery_attempts",
        DELIVERY_ATTEMPT_COLUMNS,
        "inbox_0011.delivery_attempts o JOIN delivery_ids m ON m.old = o.delivery_id",
        {"delivery_id": "m.new"},
    )
    # Everything else that holds an event or delivery id.
    for table in ("effects", "idempotency_conflicts"):
        op.execute(
            f"UPDATE {table} t SET event_id = m.new FROM event_ids m WHERE m.old = t.event_id"
        )
    for kind, ids in (("events", "event_ids"), ("deliveries", "delivery_ids")):
        op.execute(
            f"UPDATE bulk_replay_items i SET subject_id = m.new FROM bulk_replays j, {ids} m"
            f" WHERE j.id = i.job_id AND j.kind = '{kind}' AND m.old = i.subject_id"
        )
    for kind, ids in (("event", "event_ids"), ("delivery", "delivery_ids")):
        op.execute(
            f"UPDATE audit_log a SET subject_id = m.new FROM {ids} m"
            f" WHERE a.subject_kind = '{kind}' AND m.old = a.subject_id"
        )
    # New rows continue each sequence above every old id (their day differs anyway).
    for seq, source in (
        ("events_id_seq", "inbox_0011.events"),
        ("event_attempts_id_seq", "inbox_0011.event_attempts"),
        ("deliveries_id_seq", "inbox_0011.deliveries"),
        ("delivery_attempts_id_seq", "inbox_0011.delivery_attempts"),
    ):
        op.execute(
            f"SELECT setval('{seq}', coalesce((SELECT max(id) FROM {source}), 0) + 1, false)"
        )
    op.execute("DROP SCHEMA inbox_0011 CASCADE")


def downgrade() -> None:
    """Back to one table each, every row kept with the id it has now; the live keys go back
    on their events with their counters. Rows whose event a dropped partition took (an
    effect, a conflict record) go: they had no event under the old foreign keys either."""
    op.execute("CREATE SCHEMA inbox_0012")
    for table in (*TABLES, "event_keys"):
        op.execute(f"ALTER TABLE {table} SET SCHEMA inbox_0012")
    op.execute(OLD_TABLES)
    keys = (
        "LEFT JOIN inbox_0012.event_keys k ON k.tenant_id = o.tenant_id"
        " AND k.source_id = o.source_id AND k.key_digest = o.key_digest AND k.event_id = o.id"
    )
    _copy(
        "events",
        [*EVENT_COLUMNS, "key_expires_at"],
        f"inbox_0012.events o {keys}",
        {
            "key_digest": "k.key_digest",
            "key_expires_at": "k.expires_at",
            "duplicate_count": "o.duplicate_count + coalesce(k.duplicate_count, 0)",
            "first_duplicate_at": "coalesce(o.first_duplicate_at, k.first_duplicate_at)",
            "last_duplicate_at": "greatest(o.last_duplicate_at, k.last_duplicate_at)",
        },
    )
    for table, columns in (
        ("steps", STEP_COLUMNS),
        ("event_attempts", EVENT_ATTEMPT_COLUMNS),
        ("deliveries", DELIVERY_COLUMNS),
        ("delivery_attempts", DELIVERY_ATTEMPT_COLUMNS),
    ):
        source = f"inbox_0012.{table} o"
        if table == "deliveries":  # its event may be gone with its day: no reference then
            source += " LEFT JOIN events e ON e.id = o.event_id"
            _copy(table, columns, source, {"event_id": "e.id"})
        else:
            _copy(table, columns, source, {})
    for table in ("events", "event_attempts", "deliveries", "delivery_attempts"):
        op.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
            f" coalesce((SELECT max(id) FROM {table}), 0) + 1, false)"
        )
    for table in ("effects", "idempotency_conflicts"):
        op.execute(
            f"DELETE FROM {table} t WHERE NOT EXISTS (SELECT FROM events e WHERE e.id = t.event_id)"
        )
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT fk_{table}_event_id_events"
            " FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE CASCADE"
        )
    op.execute(GUARDS)
    op.execute("DROP SCHEMA inbox_0012 CASCADE")
    op.execute("DROP FUNCTION inbox_create_partition(text, date)")
    op.execute("DROP FUNCTION inbox_ledger_id(regclass)")
