"""events lose their foreign keys to tenants and sources; those are never deleted instead

Revision ID: 0016_events_without_parent_keys
Revises: 0015_delivery_floor
Create Date: 2026-12-03

Every claimed event paid for two foreign keys, per row: a lookup of its tenant and of its
source through a query of its own, each taking a KEY SHARE lock on that one row, which
every web process's claims share (PostgreSQL then builds a MultiXact for the lockers of
that row). That was about a sixth of PostgreSQL's CPU per claimed event (bench/README.md).

What the keys guarded, a tenant or source deleted while events name it, can no longer
happen at all: a trigger refuses every DELETE of a tenant or a source (disable a source
instead). The ids a claim writes come from those tables, so they always name a row.
"""

from __future__ import annotations

from alembic import op

revision = "0016_events_without_parent_keys"
down_revision = "0015_delivery_floor"
branch_labels = None
depends_on = None

_KEYS = (
    ("fk_events_tenant_id_tenants", "tenant_id", "tenants"),
    ("fk_events_source_id_sources", "source_id", "sources"),
)
_PARENTS = ("tenants", "sources")


def upgrade() -> None:
    for name, _column, _parent in _KEYS:
        op.execute(f"ALTER TABLE events DROP CONSTRAINT {name}")
    op.execute(
        """
        CREATE FUNCTION inbox_refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'a row of % is never deleted (disable a source instead)',
                TG_TABLE_NAME
                USING ERRCODE = 'restrict_violation',
                HINT = 'events and their keys name it for as long as the ledger keeps them';
        END $$
        """
    )
    for parent in _PARENTS:
        op.execute(
            f"CREATE TRIGGER {parent}_never_deleted BEFORE DELETE ON {parent}"
            " FOR EACH ROW EXECUTE FUNCTION inbox_refuse_delete()"
        )


def downgrade() -> None:
    for parent in _PARENTS:
        op.execute(f"DROP TRIGGER {parent}_never_deleted ON {parent}")
    op.execute("DROP FUNCTION inbox_refuse_delete()")
    for name, column, parent in _KEYS:
        op.execute(
            f"ALTER TABLE events ADD CONSTRAINT {name}"
            f" FOREIGN KEY ({column}) REFERENCES {parent} (id)"
        )
