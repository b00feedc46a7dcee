"""The durable session store: append-only session trees in SQLite or PostgreSQL.

`open_store()` opens the embedded SQLite database (or `$CONTEXTFOLD_DB`, or a given URL),
runs the packaged migrations and returns a `SqlSessionStore`. See docs/store.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    # The names `__getattr__` below resolves on use, spelt out for type checkers and IDEs
    # (never run: nothing is imported early). `X as X` marks a re-export (PEP 484), and
    # tests/test_public_api.py holds this block equal to _EXPORTS.
    # isort: off
    from .sql.engine import (
        create_engine as create_engine, default_sqlite_path as default_sqlite_path,
        redact_url as redact_url, resolve_url as resolve_url, retry_transient as retry_transient,
    )
    from .errors import (
        ConfigurationError as ConfigurationError, DuplicateNodeError as DuplicateNodeError,
        InvalidOperationError as InvalidOperationError, InvalidPayloadError as InvalidPayloadError,
        NodeNotFoundError as NodeNotFoundError, ReadOnlySessionError as ReadOnlySessionError,
        SessionBusyError as SessionBusyError, SessionNotFoundError as SessionNotFoundError,
        StaleBranchError as StaleBranchError, StoreError as StoreError,
    )
    from .sql.migrate import upgrade as upgrade
    from .protocol import (
        BranchReader as BranchReader, CompactionStore as CompactionStore,
        SessionReader as SessionReader, SessionStore as SessionStore,
    )
    from .sql_store import SqlSessionStore as SqlSessionStore
    from .sql.tenancy import TokenNotFoundError as TokenNotFoundError, hash_token as hash_token
    from .values import (
        DEFAULT_TENANT as DEFAULT_TENANT, CommitResult as CommitResult, MirrorHit as MirrorHit,
        MirrorWrite as MirrorWrite, RecallHit as RecallHit, SessionInfo as SessionInfo,
        TokenInfo as TokenInfo,
    )
    # isort: on

# SQLAlchemy costs a noticeable share of a CLI start: members resolve on first use.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["create_engine", "default_sqlite_path", "redact_url", "resolve_url",
                     "retry_transient"], ".sql.engine"),
    **dict.fromkeys(["ConfigurationError", "DuplicateNodeError", "InvalidOperationError",
                     "InvalidPayloadError", "NodeNotFoundError", "ReadOnlySessionError",
                     "SessionBusyError", "SessionNotFoundError", "StaleBranchError",
                     "StoreError"], ".errors"),
    "upgrade": ".sql.migrate",
    **dict.fromkeys(["BranchReader", "CompactionStore", "SessionReader", "SessionStore"],
                    ".protocol"),
    "SqlSessionStore": ".sql_store",
    **dict.fromkeys(["CommitResult", "DEFAULT_TENANT", "MirrorHit", "MirrorWrite", "RecallHit",
                     "SessionInfo", "TokenInfo"], ".values"),
    **dict.fromkeys(["TokenNotFoundError", "hash_token"], ".sql.tenancy"),
}


async def open_store(url: str | None = None, **engine_kwargs: object) -> SqlSessionStore:
    """Open (and migrate) a store.

    `url`: a `sqlite:///path`, `postgresql://user@host/db` URL or a file path. None uses
    `$CONTEXTFOLD_DB`, else the embedded SQLite file in the user's data directory.
    """
    from sqlalchemy.exc import DBAPIError

    from .errors import ConfigurationError
    from .sql.engine import create_engine, redact_url, resolve_url, retry_transient
    from .sql.migrate import upgrade
    from .sql_store import SqlSessionStore

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


__all__ = sorted([*_EXPORTS, "open_store"])  # pyright: ignore[reportUnsupportedDunderAll]
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
