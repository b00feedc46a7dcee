"""An append's writes in two statements (issue 26): the new nodes with their recall rows
(and mirror index rows), then the leaf move with its log row.

Each table still gets its own rows, in the same transaction, exactly as before; only the
round trips are folded. PostgreSQL does it with data-modifying CTEs. SQLite has none, so
each connection gets two TEMP views whose INSTEAD OF triggers write the tables (created
before its first write, in the connection's temp schema: nothing is added to the database
file, and any other client still sees only the tables). The move is conditional on the
leaf and revision it starts from (SPEC C1, C2): `move_leaf` says whether it happened, and
nothing is written when it did not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Boolean, Integer, String, Text, bindparam, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from .schema import UTCDateTime

_NODE_COLS = ("tree_id", "id", "parent_id", "kind", "role", "depth", "latest_checkpoint_id",
              "first_kept_id", "session_id", "created_at", "payload", "content_hash",
              "chain_hash")
_EXTRA = ("line_id", "turn", "doc", "prefix_hash")
_MOVE_COLS = ("tree_id", "session_id", "revision", "op", "from_leaf_id", "to_leaf_id",
              "node_id", "planned_leaf_id", "planned_revision", "at")
_STALE = "contextfold: the leaf moved"


def _view(name: str, columns: Sequence[str]) -> str:
    cols = ", ".join(f"NULL AS {c}" for c in columns)
    return f"CREATE TEMP VIEW IF NOT EXISTS {name} AS SELECT {cols} WHERE 0"


def _values(columns: Sequence[str]) -> str:
    return ", ".join(f"NEW.{c}" for c in columns)


# The trigger bodies (SQLite): a node with its rows; the move's guard; the move with its log.
_NODE_ROWS = (
    f"INSERT INTO nodes ({', '.join(_NODE_COLS)}) VALUES ({_values(_NODE_COLS)}); "
    "INSERT INTO recall_nodes (tree_id, node_id, line_id, depth, turn, document) "
    "VALUES (NEW.tree_id, NEW.id, NEW.line_id, NEW.depth, NEW.turn, NULL); "
    "INSERT INTO recall_fts (rowid, document) SELECT rowid, NEW.doc FROM recall_nodes "
    "WHERE NEW.doc IS NOT NULL AND tree_id = NEW.tree_id AND node_id = NEW.id; "
    "INSERT INTO mirror_index (tree_id, node_id, prefix_hash, depth, message_id) "
    "SELECT NEW.tree_id, NEW.id, NEW.prefix_hash, NEW.depth, NEW.id "
    "WHERE NEW.prefix_hash IS NOT NULL;")
_MOVE_CHECK = (
    f"SELECT RAISE(ABORT, '{_STALE}') WHERE NOT EXISTS (SELECT 1 FROM sessions "
    "WHERE id = NEW.session_id AND leaf_id IS NEW.from_leaf_id "
    "AND branch_revision = NEW.revision - 1 AND (NEW.writable = 0 OR read_only = 0))")
_MOVE_ROWS = (
    "UPDATE sessions SET leaf_id = NEW.to_leaf_id, branch_revision = NEW.revision, "
    "updated_at = NEW.at WHERE id = NEW.session_id; "
    f"INSERT INTO leaf_moves ({', '.join(_MOVE_COLS)}) VALUES ({_values(_MOVE_COLS)});")
# One node and the move to it (an append): the node's columns, then the move's that differ
# (its tree and session are the node's).
_APPEND_COLS = (*_NODE_COLS, *_EXTRA,
                *(c for c in (*_MOVE_COLS, "writable") if c not in _NODE_COLS))

# Run once per SQLite connection before its first write (engine.py). Unqualified names in
# a TEMP trigger's body resolve to the main database's tables.
SQLITE_SETUP = (
    _view("cf_node_write", (*_NODE_COLS, *_EXTRA)),
    "CREATE TEMP TRIGGER IF NOT EXISTS cf_node_write_rows INSTEAD OF INSERT ON cf_node_write "
    f"BEGIN {_NODE_ROWS} END",
    _view("cf_move", (*_MOVE_COLS, "writable")),
    "CREATE TEMP TRIGGER IF NOT EXISTS cf_move_rows INSTEAD OF INSERT ON cf_move BEGIN "
    f"{_MOVE_CHECK}; {_MOVE_ROWS} END",
    _view("cf_append", _APPEND_COLS),
    "CREATE TEMP TRIGGER IF NOT EXISTS cf_append_rows INSTEAD OF INSERT ON cf_append BEGIN "
    f"{_MOVE_CHECK}; {_NODE_ROWS} {_MOVE_ROWS} END",
)

SQLITE_TEARDOWN = ("DROP VIEW IF EXISTS temp.cf_node_write", "DROP VIEW IF EXISTS temp.cf_move",
                   "DROP VIEW IF EXISTS temp.cf_append")

_TYPES = {"depth": Integer, "turn": Integer, "revision": Integer, "planned_revision": Integer,
          "created_at": UTCDateTime, "at": UTCDateTime, "writable": Boolean, "payload": Text,
          "doc": Text}


def _binds(names: Sequence[str]) -> list[Any]:
    return [bindparam(n, type_=_TYPES.get(n, String)) for n in names]


def _sqlite(sql: str, names: Sequence[str]) -> Any:
    return text(sql).bindparams(*_binds(names))


_SQLITE_NODES = _sqlite(
    f"INSERT INTO cf_node_write ({', '.join((*_NODE_COLS, *_EXTRA))}) VALUES "
    f"({', '.join(':' + c for c in (*_NODE_COLS, *_EXTRA))})", (*_NODE_COLS, *_EXTRA))
_SQLITE_MOVE = _sqlite(
    f"INSERT INTO cf_move ({', '.join((*_MOVE_COLS, 'writable'))}) VALUES "
    f"({', '.join(':' + c for c in (*_MOVE_COLS, 'writable'))})", (*_MOVE_COLS, "writable"))
_PG_NODES = _sqlite(
    f"WITH n AS (INSERT INTO nodes ({', '.join(_NODE_COLS)}) VALUES "
    f"({', '.join(':' + c for c in _NODE_COLS)})), "
    "r AS (INSERT INTO recall_nodes (tree_id, node_id, line_id, depth, turn, document) "
    "VALUES (:tree_id, :id, :line_id, :depth, :turn, "
    "to_tsvector('simple'::regconfig, :doc))) "
    "INSERT INTO mirror_index (tree_id, node_id, prefix_hash, depth, message_id) "
    "SELECT :tree_id, :id, :prefix_hash, :depth, :id WHERE :prefix_hash IS NOT NULL",
    (*_NODE_COLS, *_EXTRA))
_SQLITE_APPEND = _sqlite(
    f"INSERT INTO cf_append ({', '.join(_APPEND_COLS)}) VALUES "
    f"({', '.join(':' + c for c in _APPEND_COLS)})", _APPEND_COLS)
# PostgreSQL: every row is written only when the guarded update of the session row
# happened (`FROM u`), so a stale move writes nothing and the caller rolls back anyway.
_PG_APPEND = _sqlite(
    "WITH u AS (UPDATE sessions SET leaf_id = :to_leaf_id, branch_revision = :revision, "
    "updated_at = :at WHERE id = :session_id AND leaf_id IS NOT DISTINCT FROM :from_leaf_id "
    "AND branch_revision = :revision - 1 AND (NOT :writable OR read_only = false) "
    "RETURNING id), "
    f"n AS (INSERT INTO nodes ({', '.join(_NODE_COLS)}) SELECT "
    f"{', '.join(':' + c for c in _NODE_COLS)} FROM u), "
    "r AS (INSERT INTO recall_nodes (tree_id, node_id, line_id, depth, turn, document) "
    "SELECT :tree_id, :id, :line_id, :depth, :turn, to_tsvector('simple'::regconfig, :doc) "
    "FROM u), "
    "x AS (INSERT INTO mirror_index (tree_id, node_id, prefix_hash, depth, message_id) "
    "SELECT :tree_id, :id, :prefix_hash, :depth, :id FROM u WHERE :prefix_hash IS NOT NULL) "
    f"INSERT INTO leaf_moves ({', '.join(_MOVE_COLS)}) SELECT "
    f"{', '.join(':' + c for c in _MOVE_COLS)} FROM u", _APPEND_COLS)
_PG_MOVE = _sqlite(
    "WITH u AS (UPDATE sessions SET leaf_id = :to_leaf_id, branch_revision = :revision, "
    "updated_at = :at WHERE id = :session_id AND leaf_id IS NOT DISTINCT FROM :from_leaf_id "
    "AND branch_revision = :revision - 1 AND (NOT :writable OR read_only = false) "
    f"RETURNING id) INSERT INTO leaf_moves ({', '.join(_MOVE_COLS)}) SELECT "
    f"{', '.join(':' + c for c in _MOVE_COLS)} FROM u", (*_MOVE_COLS, "writable"))


async def insert_nodes(conn: AsyncConnection, node_rows: Sequence[Mapping[str, Any]],
                       recall_rows: Sequence[Mapping[str, Any]],
                       prefix_hashes: Sequence[str | None]) -> None:
    """Insert the nodes, each with its recall row (`recall_index` placed it) and, when a
    hash is given, its mirror index row: one statement (executemany)."""
    rows = []
    for i, (node, place) in enumerate(zip(node_rows, recall_rows, strict=True)):
        rows.append({**node, "line_id": place["p_line"], "turn": place["p_turn"],
                     "doc": place["p_doc"],
                     "prefix_hash": prefix_hashes[i] if i < len(prefix_hashes) else None})
    stmt = _PG_NODES if conn.dialect.name == "postgresql" else _SQLITE_NODES
    await conn.execute(stmt, rows)


async def move_leaf(conn: AsyncConnection, values: Mapping[str, Any], *,
                    writable: bool) -> bool:
    """Move the session's leaf from `from_leaf_id` at revision `revision - 1` to
    `to_leaf_id` at `revision`, and log the move: one statement. False (nothing written)
    when the row is not at that leaf and revision (or, `writable`, is read-only)."""
    return await _guarded(conn, _PG_MOVE, _SQLITE_MOVE, {**values, "writable": writable})


async def append_node(conn: AsyncConnection, node_row: Mapping[str, Any],
                      recall_row: Mapping[str, Any], prefix_hash: str | None,
                      move: Mapping[str, Any], *, writable: bool) -> bool:
    """`insert_nodes` of one node and `move_leaf` to it, in one statement (an append: a
    round trip fewer per append, issue 26). False, and nothing written, when the session
    row is not at the move's leaf and revision (or, `writable`, is read-only)."""
    params = {**node_row, "line_id": recall_row["p_line"], "turn": recall_row["p_turn"],
              "doc": recall_row["p_doc"], "prefix_hash": prefix_hash, **move,
              "writable": writable}
    return await _guarded(conn, _PG_APPEND, _SQLITE_APPEND, params)


async def _guarded(conn: AsyncConnection, pg: Any, sqlite: Any,
                   params: Mapping[str, Any]) -> bool:
    """Run a write guarded by the session row's leaf and revision: True when it wrote, False
    (nothing written) when the guard did not hold (PostgreSQL: no row matched; SQLite: the
    trigger's `_STALE` abort)."""
    if conn.dialect.name == "postgresql":
        result = await conn.execute(pg, params)
        return bool(result.rowcount == 1)
    try:
        await conn.execute(sqlite, params)
    except IntegrityError as exc:
        if _STALE in str(exc.orig):
            return False
        raise
    return True


def is_place_race(exc: IntegrityError) -> bool:
    """The recall index refused a place another writer took first (its unique line index)."""
    message = str(exc.orig)
    # SQLite: the no-REPLACE trigger (migration 0006) speaks first; the node itself was
    # inserted just before, so a taken recall row means a taken place.
    return "ux_recall_nodes_line" in message or "recall_nodes.line_id" in message or \
        "recall_nodes rows are append-only (REPLACE refused)" in message
