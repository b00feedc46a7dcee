"""Run the packaged Alembic migrations on an open engine (no alembic.ini needed).

`open_store` calls `upgrade` every time it opens a database, so a new file or an empty
PostgreSQL schema gets the current tables, and an older one is brought up to date.
Concurrent openers are serialised (PostgreSQL advisory lock, SQLite write lock).

A database already at the newest shipped revision is recognised with one read of
`alembic_version`, without importing Alembic: most opens are of an up-to-date database, and
Alembic's import is a noticeable share of a short command's start-up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from .engine import read_connection, write_connection
from .head import MIGRATIONS_DIR, shipped_head

if TYPE_CHECKING:
    from alembic.config import Config

# Arbitrary constant: the advisory lock key that serialises concurrent migrations.
_MIGRATION_LOCK_KEY = 0x636F6E7466  # "contf"


def _config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest migration shipped with this package."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    """The migration the database is at (None for an empty database)."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


async def upgrade(engine: AsyncEngine, target: str = "head") -> None:
    """Bring the database to `target` (default: the newest shipped migration)."""
    if target == "head" and await _stored_revision(engine) == shipped_head():
        return  # up to date: no Alembic needed (module docstring)
    from alembic import command

    await _run(engine, lambda conn: command.upgrade(_config(conn), target))


async def downgrade(engine: AsyncEngine, target: str) -> None:
    """Step the schema back (tests and operators only; it drops tables)."""
    from alembic import command

    await _run(engine, lambda conn: command.downgrade(_config(conn), target))


async def _stored_revision(engine: AsyncEngine) -> str | None:
    """The revision recorded in the database; None when there is none (or no table yet)."""
    try:
        async with read_connection(engine) as conn:
            rows = (await conn.execute(text("SELECT version_num FROM alembic_version"))).all()
    except DBAPIError:
        return None
    return rows[0][0] if len(rows) == 1 else None


async def _run(engine: AsyncEngine, action: Callable[[Connection], None]) -> None:
    async with write_connection(engine, folded=False) as conn:
        if engine.dialect.name == "postgresql":
            # SQLite's write lock already serialises; PostgreSQL needs an explicit lock so two
            # workers opening an empty database do not both create the tables.
            await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK_KEY})
        await conn.run_sync(action)
