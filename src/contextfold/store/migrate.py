"""Run the packaged Alembic migrations on an open engine (no alembic.ini needed).

`open_store` calls `upgrade` every time it opens a database, so a new file or an empty
PostgreSQL schema gets the current tables, and an older one is brought up to date.
Concurrent openers are serialised (PostgreSQL advisory lock, SQLite write lock).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncEngine

from .engine import write_connection

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# Arbitrary constant: the advisory lock key that serialises concurrent migrations.
_MIGRATION_LOCK_KEY = 0x636F6E7466  # "contf"


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest migration shipped with this package."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    """The migration the database is at (None for an empty database)."""
    return MigrationContext.configure(connection).get_current_revision()


async def upgrade(engine: AsyncEngine, target: str = "head") -> None:
    """Bring the database to `target` (default: the newest shipped migration)."""
    await _run(engine, lambda conn: command.upgrade(_config(conn), target))


async def downgrade(engine: AsyncEngine, target: str) -> None:
    """Step the schema back (tests and operators only; it drops tables)."""
    await _run(engine, lambda conn: command.downgrade(_config(conn), target))


async def _run(engine: AsyncEngine, action: Callable[[Connection], None]) -> None:
    async with write_connection(engine) as conn:
        if engine.dialect.name == "postgresql":
            # SQLite's write lock already serialises; PostgreSQL needs an explicit lock so two
            # workers opening an empty database do not both create the tables.
            await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK_KEY})
        await conn.run_sync(action)
