"""Running the Alembic migrations from code (``inbox migrate``, the tests, ``make run``).

The migrations are package data (``inbox/store/schema/migrations``), found with
``importlib.resources``, so an installed wheel carries them and no ``alembic.ini`` is needed.
"""

from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from inbox.store.db.engine import sqlalchemy_url


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option(
        "script_location", str(resources.files("inbox.store.schema") / "migrations")
    )
    # The option is read through configparser's interpolation: a percent-encoded character
    # of the URL (a password's "%40") is written as "%%40" to come back as itself.
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(database_url).replace("%", "%%"))
    return cfg


def head_revision() -> str | None:
    """The newest revision the code knows."""
    return ScriptDirectory.from_config(alembic_config("postgresql://")).get_current_head()


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)
