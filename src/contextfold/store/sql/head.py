"""The newest schema revision this package ships, read from the migration files.

Neither Alembic nor SQLAlchemy is imported: `open_store` uses it to skip Alembic for an
up-to-date database, and the command line's read-only `sqlite3` snapshot to refuse any
database that is not exactly at this revision.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

MIGRATIONS_DIR = Path(__file__).parents[1] / "migrations"

_REVISION_LINE = re.compile(r"^(down_revision|revision)\s*(?::[^=]*)?=\s*(.+?)\s*$", re.M)


@cache
def shipped_head() -> str | None:
    """The newest shipped revision, read from the migration files' `revision` and
    `down_revision` lines (the one no other revision names as its parent); None if the
    files are not in that plain form (then Alembic decides)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        found = dict((k, v) for k, v in _REVISION_LINE.findall(path.read_text("utf-8")))
        revision = _literal(found.get("revision"))
        if not isinstance(revision, str):
            return None
        revisions.add(revision)
        parent = _literal(found.get("down_revision", "None"))
        if isinstance(parent, str):
            parents.add(parent)
        elif parent is not None:
            return None  # a merge revision (a tuple): leave it to Alembic
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def _literal(source: str | None) -> Any:
    import ast

    try:
        return ast.literal_eval(source) if source is not None else ValueError
    except (ValueError, SyntaxError):
        return ValueError
