"""The schema's MetaData (naming convention) and the helpers its table modules share."""

from __future__ import annotations

from sqlalchemy import Column, DateTime, MetaData, func

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def one_of(column: str, values: tuple[str, ...]) -> str:
    """A CHECK that ``column`` holds one of ``values`` (the states, spelled in states.py)."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def now_column() -> Column[object]:
    return Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now())
