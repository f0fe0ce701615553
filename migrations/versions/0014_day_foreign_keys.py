"""a child row's foreign key names its own day's parent partition, not the whole table

Revision ID: 0014_day_foreign_keys
Revises: 0013_ledger_floor
Create Date: 2026-12-01

A foreign key into a partitioned table is checked by a query on the whole table
(``SELECT 1 FROM events WHERE id = $1 FOR KEY SHARE``), a cached generic plan that
locks and prunes every daily partition for each row it checks: a year of them costs
more than the insert. A child and its parent share their day (the child is partitioned
by its parent's id), so each day's child partition gets a key into that day's parent
partition instead, and the DEFAULT ones into each other; retention drops them together.
"""

from __future__ import annotations

from alembic import op

revision = "0014_day_foreign_keys"
down_revision = "0013_ledger_floor"
branch_labels = None
depends_on = None

# child -> (its column, the parent table, the table-wide key 0012 made)
CHILDREN = {
    "steps": ("event_id", "events", "fk_steps_event_id_events"),
    "event_attempts": ("event_id", "events", "fk_event_attempts_event_id_events"),
    "delivery_attempts": (
        "delivery_id",
        "deliveries",
        "fk_delivery_attempts_delivery_id_deliveries",
    ),
}

LINK = """
-- The foreign key of one day's partition of a child table into that day's partition of
-- its parent (day NULL: the DEFAULT partitions). False when there is nothing to link:
-- not a child table, or linked already. Fails when the parent's partition is missing.
CREATE FUNCTION inbox_link_partition(child text, day date) RETURNS boolean
    LANGUAGE plpgsql AS $$
DECLARE
    suffix text := CASE WHEN day IS NULL THEN '_default' ELSE '_p' || to_char(day, 'YYYYMMDD') END;
    col text;
    parent text;
BEGIN
    CASE child
        WHEN 'steps', 'event_attempts' THEN col := 'event_id'; parent := 'events';
        WHEN 'delivery_attempts' THEN col := 'delivery_id'; parent := 'deliveries';
        ELSE RETURN false;
    END CASE;
    IF EXISTS (SELECT FROM pg_constraint
                WHERE conname = 'fk_' || child || suffix
                  AND conrelid = to_regclass(child || suffix)) THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I FOREIGN KEY (%I) REFERENCES %I (id)'
                   ' ON DELETE CASCADE',
                   child || suffix, 'fk_' || child || suffix, col, parent || suffix);
    RETURN true;
END $$;
"""

CREATE = """
-- One day's partition of a ledger table (its name: inbox.domain.ledger.partition_name),
-- a child's linked to its parent's. False when it exists already. Fails when the
-- DEFAULT partition holds rows of that day: inbox.store.schema.partitions moves them first.
CREATE OR REPLACE FUNCTION inbox_create_partition(parent text, day date) RETURNS boolean
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
    PERFORM inbox_link_partition(parent, day);
    RETURN true;
END $$;
"""

# The function as 0012 made it (for the downgrade).
CREATE_0012 = CREATE.replace("    PERFORM inbox_link_partition(parent, day);\n", "")

_PARTITIONS = """
    SELECT p.child, c.relname,
           CASE WHEN c.relname = p.child || '_default' THEN NULL
                ELSE to_date(right(c.relname, 8), 'YYYYMMDD') END AS day
      FROM unnest(ARRAY['steps', 'event_attempts', 'delivery_attempts']) AS p(child)
      JOIN pg_inherits i ON i.inhparent = CAST(p.child AS regclass)
      JOIN pg_class c ON c.oid = i.inhrelid
"""


def upgrade() -> None:
    op.execute(LINK)
    op.execute(CREATE)
    # Every day's key first, then the table-wide ones go: no moment without a key.
    op.execute(f"SELECT inbox_link_partition(child, day) FROM ({_PARTITIONS}) AS parts")
    for child, (_, _, name) in CHILDREN.items():
        op.execute(f"ALTER TABLE {child} DROP CONSTRAINT {name}")


def downgrade() -> None:
    for child, (col, parent, name) in CHILDREN.items():
        op.execute(
            f"ALTER TABLE {child} ADD CONSTRAINT {name} FOREIGN KEY ({col})"
            f" REFERENCES {parent} (id) ON DELETE CASCADE"
        )
    op.execute(
        f"""
        DO $$
        DECLARE part record;
        BEGIN
            FOR part IN {_PARTITIONS} LOOP
                EXECUTE format('ALTER TABLE %I DROP CONSTRAINT IF EXISTS %I',
                               part.relname, 'fk_' || part.relname);
            END LOOP;
        END $$
        """
    )
    op.execute(CREATE_0012)
    op.execute("DROP FUNCTION inbox_link_partition(text, date)")
