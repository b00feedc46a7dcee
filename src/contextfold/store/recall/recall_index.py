"""Keeping the recall index (SPEC L1): every node gets its `recall_nodes` row, and every
message its full-text entry, in the transaction that inserts the node.

Placement (what confines recall to one branch, SPEC L4): a node continues its parent's
*line* unless the parent already has a child on that line, in which case it starts a line
named by its own id. A line is therefore a chain (one node per depth), and a branch is a
few line prefixes: the leaf's line up to the leaf's depth, then the line of the node where
that line forked off, up to that node's depth, and so on. Roots continue the tree's virtual
line (named by the tree id, depth -1). A unique index on (tree, line, depth) makes two
writers that raced for the same place fail rather than share it; on PostgreSQL the parent's
row is locked first so they queue instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, bindparam, func, insert, literal_column, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.recall.recall_text import index_document, indexed_text
from contextfold.core.values.messages import Node

from ..sql.memo import MemoMap, StaleMemo
from ..sql.schema import recall_nodes, trees

ROOT_DEPTH = -1


@dataclass(frozen=True)
class Place:
    line_id: str
    depth: int
    turn: int


async def place_of(conn: AsyncConnection, tree_id: str, node_id: str, *,
                   lock: bool = False) -> Place | None:
    """Where a stored node sits (None if it has no recall row)."""
    stmt = select(recall_nodes.c.line_id, recall_nodes.c.depth, recall_nodes.c.turn).where(
        recall_nodes.c.tree_id == tree_id, recall_nodes.c.node_id == node_id)
    if lock and conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    row = (await conn.execute(stmt)).first()
    return Place(row[0], row[1], row[2]) if row is not None else None


async def _taken(conn: AsyncConnection, tree_id: str, line_id: str, depth: int) -> bool:
    stmt = select(recall_nodes.c.node_id).where(
        recall_nodes.c.tree_id == tree_id, recall_nodes.c.line_id == line_id,
        recall_nodes.c.depth == depth)
    return (await conn.execute(stmt)).first() is not None


async def _base(conn: AsyncConnection, tree_id: str, node: Node, depth: int,
                known: dict[str, Place], new_tree: bool,
                places: MemoMap[tuple[str, str], Place] | None = None) -> tuple[Place, str]:
    """The place the node would continue from, and how its (line, depth+1) is checked:
    "no" (a parent of this batch), "db" (read it), "index" (the parent's place was
    remembered: the unique index refuses a taken place, and the write is run again)."""
    if node.parent_id is None:
        if not new_tree and conn.dialect.name == "postgresql":
            # A second root (an edit of the first message) races only with other roots.
            await conn.execute(select(trees.c.id).where(trees.c.id == tree_id).with_for_update())
        return Place(tree_id, ROOT_DEPTH, 0), "no" if new_tree else "db"
    if node.parent_id in known:
        return known[node.parent_id], "no"
    remembered = places.get((tree_id, node.parent_id)) if places is not None else None
    if remembered is not None:
        return remembered, "index"
    stored = await place_of(conn, tree_id, node.parent_id, lock=True)
    if stored is None:
        # A parent without a recall row (written outside the store): start a line here so
        # the node itself is still found; its unindexed ancestors cannot be.
        return Place(node.id, depth - 1, 0), "no"
    return stored, "db"


@dataclass(frozen=True)
class Entry:
    """What placing and indexing one node needs (parents are placed before children)."""

    node_id: str
    parent_id: str | None
    depth: int
    is_user: bool
    doc: str  # the index document ("" for a checkpoint)

    @classmethod
    def of(cls, node: Node, depth: int) -> Entry:
        msg = node.message
        doc = index_document(indexed_text(msg)) if msg is not None else ""
        return cls(node.id, node.parent_id, depth, node.is_user_message, doc)


def _row(tree_id: str, entry: Entry, place: Place) -> dict[str, Any]:
    return {"p_tree": tree_id, "p_node": entry.node_id, "p_line": place.line_id,
            "p_depth": place.depth, "p_turn": place.turn, "p_doc": entry.doc or None}


def _placed(entry: Entry, base: Place, line_taken: bool) -> Place:
    """The placement rule: continue the parent's line unless that place is taken."""
    return Place(entry.node_id if line_taken else base.line_id, entry.depth,
                 base.turn + (1 if entry.is_user else 0))


def place_new_tree(tree_id: str, entries: Sequence[Entry]) -> list[dict[str, Any]]:
    """Rows for a whole tree placed in memory (an import, or the migration's backfill)."""
    known: dict[str, Place] = {}
    taken: set[tuple[str, int]] = set()
    rows = []
    for entry in entries:
        base = known.get(entry.parent_id) if entry.parent_id is not None else None
        if base is None:  # a root, or an orphan of a damaged tree: continue the tree line
            base = Place(tree_id, entry.depth - 1, 0) if entry.parent_id is not None \
                else Place(tree_id, ROOT_DEPTH, 0)
        place = _placed(entry, base, (base.line_id, entry.depth) in taken)
        taken.add((place.line_id, place.depth))
        known[entry.node_id] = place
        rows.append(_row(tree_id, entry, place))
    return rows


@dataclass
class Placement:
    """Where new nodes go: their recall rows, their places by node id, and the parents
    whose remembered place only the unique index checks."""

    rows: list[dict[str, Any]]
    places: dict[str, Place]
    trusted: list[str]

    def forget(self, places: MemoMap[tuple[str, str], Place] | None, tree_id: str) -> None:
        """Drop the trusted parents' remembered places (one of them was taken)."""
        if places is not None:
            for parent in self.trusted:
                places.pop((tree_id, parent))


async def place_nodes(conn: AsyncConnection, tree_id: str, nodes: Sequence[tuple[Node, int]],
                      places: MemoMap[tuple[str, str], Place] | None = None) -> Placement:
    """Place `nodes` (parents before children, each with its stored depth) on a stored
    tree. `places`: parents' places already known (issue 26: a steady append reads none)."""
    entries = [Entry.of(node, depth) for node, depth in nodes]
    out = Placement([], {}, [])
    for node, entry in zip((n for n, _ in nodes), entries, strict=True):
        base, check = await _base(conn, tree_id, node, entry.depth, out.places, False, places)
        if check == "index":
            out.trusted.append(node.parent_id or "")
        taken = check == "db" and await _taken(conn, tree_id, base.line_id, entry.depth)
        out.places[node.id] = _placed(entry, base, taken)
        out.rows.append(_row(tree_id, entry, out.places[node.id]))
    return out


async def index_nodes(conn: AsyncConnection, tree_id: str, nodes: Sequence[tuple[Node, int]],
                      *, new_tree: bool = False) -> None:
    """Place and index `nodes` (parents before children, each with its stored depth)."""
    if new_tree:  # an import: placed in memory
        entries = [Entry.of(node, depth) for node, depth in nodes]
        await insert_rows(conn, place_new_tree(tree_id, entries))
        return
    try:
        await insert_rows(conn, (await place_nodes(conn, tree_id, nodes)).rows)
    except IntegrityError as exc:
        raise StaleMemo(f"a recall place in tree {tree_id} was taken by another writer") \
            from exc


async def insert_rows(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Write placed rows and their full-text entries (one statement per 1,000 rows)."""
    if not rows:
        return
    for stmt, batch in statements(conn.dialect.name, rows):
        await conn.execute(stmt, batch)


def statements(dialect: str, rows: Sequence[dict[str, Any]]) -> list[tuple[Any, list[Any]]]:
    """The executemany statements writing `rows` (shared with the migration's backfill)."""
    if dialect == "postgresql":
        document: Any = func.to_tsvector(literal_column("'simple'::regconfig"),
                                         bindparam("p_doc", type_=Text))
    else:
        document = None
    stmt = insert(recall_nodes).values(
        tree_id=bindparam("p_tree"), node_id=bindparam("p_node"), line_id=bindparam("p_line"),
        depth=bindparam("p_depth"), turn=bindparam("p_turn"), document=document)
    out: list[tuple[Any, list[Any]]] = []
    for start in range(0, len(rows), 1000):
        out.append((stmt, list(rows[start : start + 1000])))
    if dialect == "sqlite":
        fts = text("INSERT INTO recall_fts(rowid, document) SELECT rowid, :p_doc FROM "
                   "recall_nodes WHERE tree_id = :p_tree AND node_id = :p_node")
        docs = [r for r in rows if r["p_doc"]]
        for start in range(0, len(docs), 1000):
            out.append((fts, docs[start : start + 1000]))
    return out
