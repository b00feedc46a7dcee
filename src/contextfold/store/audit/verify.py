"""`verify_tree`: check every row of one session tree (what `contextfold verify` runs).

Reads the whole tree (an audit, not a hot path) and checks, like `git fsck`: every node's
content hash, its link in the digest chain (each node's `chain_hash` covers its parent's),
its `kind` and `role` columns against its payload, parent links inside the tree,
insert-time columns, every checkpoint's kept boundary, the leaf-move log of every session
on the tree, that every session's branch validates, and the tables derived from the nodes
(`mirror_index`, the recall index: `derived.py`).
It reports each session's *head digest* (its leaf's `chain_hash`): recorded somewhere else,
it pins the whole history before it, the way a git commit id does (docs/store.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from contextfold.core.values.tree import DamagedBranch, build_branch

from ..errors import SessionNotFoundError
from ..sql.engine import read_connection
from ..sql.rows import chained_records
from ..sql.schema import leaf_moves, nodes, sessions
from .derived import derived_problems
from .invariants import InvariantReport, check_moves, check_topology

if TYPE_CHECKING:
    from ..sql_store import SqlSessionStore


@dataclass(frozen=True)
class TreeReport:
    """What `verify_tree` found; `ok` when nothing is wrong."""

    session_id: str
    tree_id: str
    nodes: int
    sessions: int
    problems: tuple[str, ...] = ()
    heads: dict[str, str | None] = field(default_factory=dict)  # session id -> head digest

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "session_id": self.session_id, "tree_id": self.tree_id,
                "nodes": self.nodes, "sessions": self.sessions,
                "problems": list(self.problems), "heads": self.heads}


async def verify_tree(store: SqlSessionStore, session_id: str) -> TreeReport:
    """Check the whole tree of `session_id` (every node, every session on it)."""
    async with read_connection(store.engine) as conn:
        row = (await conn.execute(select(sessions).where(sessions.c.id == session_id))
               ).mappings().first()
        if row is None:
            raise SessionNotFoundError(session_id, store.database)
        tree_id = row["tree_id"]
        node_rows = (await conn.execute(select(nodes).where(nodes.c.tree_id == tree_id))
                     ).mappings().all()
        session_rows = (await conn.execute(
            select(sessions).where(sessions.c.tree_id == tree_id).order_by(sessions.c.id)
        )).mappings().all()
        move_rows = (await conn.execute(
            select(leaf_moves).where(leaf_moves.c.tree_id == tree_id)
            .order_by(leaf_moves.c.session_id, leaf_moves.c.revision)
        )).mappings().all()
        records = chained_records(node_rows)
        derived = await derived_problems(conn, tree_id, records,
                                         {r["id"]: r for r in node_rows})
    report = InvariantReport()
    for record in records.values():
        error = getattr(record, "error", None)
        if error is not None:
            report.problems.append(f"node {record.id}: {error}")
    check_topology({tree_id: records}, {tree_id: {r["id"]: r for r in node_rows}}, report)
    check_moves(session_rows, move_rows, {tree_id: records}, report)
    heads: dict[str, str | None] = {}
    by_id = {r["id"]: r for r in node_rows}
    for srow in session_rows:
        leaf = srow["leaf_id"]
        heads[srow["id"]] = by_id[leaf]["chain_hash"] if leaf in by_id else None
        if leaf is not None:
            branch = build_branch(records, leaf)
            if isinstance(branch, DamagedBranch):
                report.problems.extend(f"session {srow['id']}: {p}" for p in branch.problems)
    report.problems.extend(derived)
    return TreeReport(session_id=session_id, tree_id=tree_id, nodes=len(node_rows),
                      sessions=len(session_rows), problems=tuple(dict.fromkeys(report.problems)),
                      heads=heads)
