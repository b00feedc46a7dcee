"""Where the database is when the user names none: `$CONTEXTFOLD_DB`, else the embedded
SQLite file in the user's data directory. Kept free of SQLAlchemy so that the command
line's read-only snapshot (`snapshot.py`) finds the same file without loading it."""

from __future__ import annotations

from pathlib import Path

ENV_VAR = "CONTEXTFOLD_DB"


def default_sqlite_path() -> Path:
    """The embedded database file: `<user data dir>/contextfold/contextfold.db`."""
    import platformdirs  # only when no database is named: a command with --db skips it

    return Path(platformdirs.user_data_dir("contextfold", appauthor=False)) / "contextfold.db"
