"""The durable session store: append-only session trees in SQLite or PostgreSQL.

`open_store()` opens the embedded SQLite database (or `$CONTEXTFOLD_DB`, or a given URL),
runs the packaged migrations and returns a `SqlSessionStore`. See docs/store.md.
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

from .engine import create_engine, default_sqlite_path, redact_url, resolve_url, retry_transient
from .errors import (
    ConfigurationError,
    DuplicateNodeError,
    InvalidOperationError,
    InvalidPayloadError,
    NodeNotFoundError,
    ReadOnlySessionError,
    SessionBusyError,
    SessionNotFoundError,
    StaleBranchError,
    StoreError,
)
from .migrate import upgrade
from .protocol import SessionStore
from .sql import SqlSessionStore
from .values import CommitResult, RecallHit, SessionInfo


async def open_store(url: str | None = None, **engine_kwargs: object) -> SqlSessionStore:
    """Open (and migrate) a store.

    `url`: a `sqlite:///path`, `postgresql://user@host/db` URL or a file path. None uses
    `$CONTEXTFOLD_DB`, else the embedded SQLite file in the user's data directory.
    """
    resolved = resolve_url(url)
    engine = create_engine(resolved, **engine_kwargs)
    try:
        # Retried: several processes opening a new SQLite file at once race for its lock.
        await retry_transient(lambda: upgrade(engine))
    except DBAPIError as exc:
        await engine.dispose()
        # The driver's message, never the URL (it may hold a password).
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
        raise ConfigurationError(
            f"cannot open the database {redact_url(resolved)}: {redact_url(reason)}") from None
    except BaseException:
        await engine.dispose()
        raise
    return SqlSessionStore(engine)


__all__ = [
    "CommitResult",
    "ConfigurationError",
    "DuplicateNodeError",
    "InvalidOperationError",
    "InvalidPayloadError",
    "NodeNotFoundError",
    "ReadOnlySessionError",
    "RecallHit",
    "SessionBusyError",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionStore",
    "SqlSessionStore",
    "StaleBranchError",
    "StoreError",
    "create_engine",
    "default_sqlite_path",
    "open_store",
    "resolve_url",
    "upgrade",
]
