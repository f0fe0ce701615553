"""Running the Alembic migrations from code (``inbox migrate``, the tests, ``make run``).

The migrations live in the top-level ``migrations`` package, found with
``importlib.resources``, so an installed wheel carries them and no ``alembic.ini`` is needed.

Alembic is imported where it is used: its import (its DDL dialects and autogenerate come
with it) is a fifth of a worker's or a CLI command's start, and only ``inbox migrate`` and
the first ``/readyz`` need it.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from inbox.store.db.engine import sqlalchemy_url

if TYPE_CHECKING:
    from alembic.config import Config


def alembic_config(database_url: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("migrations")))
    # The option is read through configparser's interpolation: a percent-encoded character
    # of the URL (a password's "%40") is written as "%%40" to come back as itself.
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(database_url).replace("%", "%%"))
    return cfg


def head_revision() -> str | None:
    """The newest revision the code knows."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("postgresql://")).get_current_head()


def upgrade(database_url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(database_url), revision)
