"""Reading nodes: point look-ups and the bounded ancestor walk (one recursive CTE).

Every statement here is bounded by one `tree_id`: no query joins two trees (sharding).
The walk uses UNION, not UNION ALL, so a parent cycle stored by mistake ends the recursion
instead of looping; `core.tree.build_branch` then reports the cycle (SPEC D1).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.messages import Node
from contextfold.core.tree import Branch, DamagedBranch, InvalidRecord, Problem, build_branch

from .rows import CHAIN_MISMATCH, HASH_MISMATCH, chain_digest, chained_records, content_hash
from .schema import nodes

# The columns a branch needs; insert-time bookkeeping columns are read separately.
_NODE_COLUMNS = ("tree_id", "id", "parent_id", "created_at", "payload", "content_hash",
                 "chain_hash")


async def node_meta(conn: AsyncConnection, tree_id: str, node_id: str) -> RowMapping | None:
    """Bookkeeping columns of one node (no payload)."""
    stmt = select(
        nodes.c.id, nodes.c.parent_id, nodes.c.kind, nodes.c.role, nodes.c.depth,
        nodes.c.latest_checkpoint_id, nodes.c.first_kept_id, nodes.c.content_hash,
        nodes.c.chain_hash,
    ).where(nodes.c.tree_id == tree_id, nodes.c.id == node_id)
    return (await conn.execute(stmt)).mappings().first()


async def trees_of_node(conn: AsyncConnection, node_id: str) -> list[str]:
    """The trees holding a node id. Ids are unique per tree: the store's own ids (UUIDv7)
    never repeat, but imported ids (Pi's 8 hex characters) may recur in unrelated trees."""
    stmt = select(nodes.c.tree_id).where(nodes.c.id == node_id).order_by(nodes.c.tree_id)
    return list((await conn.execute(stmt)).scalars())


async def stored_hashes(conn: AsyncConnection, ids: Sequence[str]) -> set[tuple[str, str]]:
    """(id, content_hash) of every stored node, in any tree, whose id is one of `ids`: an
    import whose nodes match by id *and* content was imported before."""
    found: set[tuple[str, str]] = set()
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        rows = await conn.execute(select(nodes.c.id, nodes.c.content_hash)
                                  .where(nodes.c.id.in_(chunk)))
        found.update((r[0], r[1]) for r in rows)
    return found


async def walk_up(
    conn: AsyncConnection, tree_id: str, leaf_id: str, stop_id: str | None = None,
    min_depth: int | None = None,
) -> dict[str, Node | InvalidRecord]:
    """The ancestor chain of `leaf_id` within its tree, ending at `stop_id` or a root
    (or at depth `min_depth`: a page of the branch).

    Cost is proportional to the number of nodes walked (one index look-up each), never
    to the size of the tree.
    """
    return records(await _walk_rows(conn, tree_id, leaf_id, stop_id, min_depth))


async def _walk_rows(
    conn: AsyncConnection, tree_id: str, leaf_id: str, stop_id: str | None = None,
    min_depth: int | None = None,
) -> list[RowMapping]:
    cols = [nodes.c[name] for name in _NODE_COLUMNS]
    chain = select(*cols).where(nodes.c.tree_id == tree_id, nodes.c.id == leaf_id).cte(
        "chain", recursive=True
    )
    parent = nodes.alias("parent")
    step = select(*[parent.c[name] for name in _NODE_COLUMNS]).join(
        chain, and_(parent.c.tree_id == chain.c.tree_id, parent.c.id == chain.c.parent_id)
    )
    if stop_id is not None:
        step = step.where(chain.c.id != stop_id)
    if min_depth is not None:
        step = step.where(parent.c.depth >= min_depth)
    chain = chain.union(step)
    return list((await conn.execute(select(chain))).mappings().all())


async def history_problems(conn: AsyncConnection, tree_id: str,
                           branch: Branch) -> tuple[Problem, ...]:
    """Damage in the already-summarised history that the O(tail) `branch` did not read.

    Walks from the branch's oldest node to the root and checks every row's content hash
    and its link in the digest chain, and that the walk ends at a root; payloads are not
    parsed (a row with right hashes but a payload that does not parse can only be written
    by someone who recomputed the hashes: `contextfold verify` and full loads find it).
    A session with such damage is read-only like one whose tail is damaged (SPEC D2).
    """
    if branch.complete or not branch.nodes:
        return ()
    start = branch.nodes[0].id
    by_id = {row["id"]: row for row in await _walk_rows(conn, tree_id, start)}
    path: list[str] = []
    seen: set[str] = set()
    current: str | None = start
    while current is not None:  # topology first, reported as a full load reports it
        if current in seen:
            return (Problem("cycle", current, "parent links loop back to this node"),)
        if current not in by_id:
            return (Problem("missing_parent", path[-1], f"node {current!r} is not stored"),)
        seen.add(current)
        path.append(current)
        current = by_id[current]["parent_id"]
    for node_id in path:
        row = by_id[node_id]
        if content_hash(node_id, row["parent_id"], row["created_at"],
                        row["payload"]) != row["content_hash"]:
            return (Problem("invalid_node", node_id, HASH_MISMATCH),)
        parent = row["parent_id"]
        parent_chain = by_id[parent]["chain_hash"] if parent is not None else None
        if row["chain_hash"] != chain_digest(parent_chain, row["content_hash"]):
            return (Problem("invalid_node", node_id, CHAIN_MISMATCH),)
    return ()


def records(rows: Iterable[RowMapping | dict[str, Any]]) -> dict[str, Node | InvalidRecord]:
    return chained_records(rows)


async def tree_rows(conn: AsyncConnection, tree_id: str) -> list[RowMapping]:
    """Every node row of one tree, oldest first."""
    cols = [nodes.c[name] for name in _NODE_COLUMNS]
    stmt = (
        select(*cols, nodes.c.depth)
        .where(nodes.c.tree_id == tree_id)
        .order_by(nodes.c.depth, nodes.c.created_at, nodes.c.id)
    )
    return list((await conn.execute(stmt)).mappings().all())


async def load_tail(
    conn: AsyncConnection, tree_id: str, leaf_id: str | None, revision: int
) -> Branch | DamagedBranch:
    """What the model needs: from the latest checkpoint's boundary to the leaf (O(tail)).

    The leaf row names its latest checkpoint (computed at insert); that checkpoint's
    `first_kept_id` (or the checkpoint itself when nothing was kept raw) is where the walk
    stops. If the bookkeeping disagrees with what the walk finds, the full chain is loaded
    instead, so a wrong column can cost time but never hide history.
    """
    if leaf_id is None:
        return Branch(nodes=(), complete=True, revision=revision)
    leaf = await node_meta(conn, tree_id, leaf_id)
    if leaf is None:
        problem = Problem("missing_leaf", leaf_id, f"session leaf {leaf_id!r} is not stored")
        return DamagedBranch(readable=(), problems=(problem,))
    cp_id = leaf["latest_checkpoint_id"]
    stop: str | None = None
    if cp_id is not None:
        cp = await node_meta(conn, tree_id, cp_id)
        if cp is not None and cp["kind"] == "checkpoint":
            stop = cp["first_kept_id"] or cp_id
    found = await walk_up(conn, tree_id, leaf_id, stop)
    branch = build_branch(found, leaf_id, revision=revision, stop_at=stop)
    if stop is not None and isinstance(branch, Branch) and not branch.complete:
        latest = branch.latest_checkpoint
        if latest is None or latest.id != cp_id:
            return await load_full(conn, tree_id, leaf_id, revision)
    return branch


async def load_page(
    conn: AsyncConnection, tree_id: str, leaf_id: str | None, revision: int, limit: int
) -> Branch | DamagedBranch:
    """The last `limit` nodes of the branch ending at `leaf_id` (a page for a UI).

    Bounded by the insert-time `depth` column, so it reads `limit` rows whatever the
    length of the history. `complete` is False when older nodes exist.
    """
    if leaf_id is None:
        return Branch(nodes=(), complete=True, revision=revision)
    leaf = await node_meta(conn, tree_id, leaf_id)
    if leaf is None:
        problem = Problem("missing_leaf", leaf_id, f"node {leaf_id!r} is not stored")
        return DamagedBranch(readable=(), problems=(problem,))
    found = await walk_up(conn, tree_id, leaf_id, min_depth=max(0, leaf["depth"] - limit + 1))
    # The oldest node read: the one whose parent was not read (the page's edge).
    edge = next((r.id for r in found.values()
                 if r.parent_id is not None and r.parent_id not in found), None)
    branch = build_branch(found, leaf_id, revision=revision, stop_at=edge)
    if isinstance(branch, DamagedBranch) and edge is not None and all(
            _kept_before_page(p, found) for p in branch.problems):
        # A checkpoint on the page may keep raw history from before the page: that is the
        # page's edge, not damage (the tail and full loads still check it).
        return Branch(nodes=branch.readable, complete=False, revision=revision)
    return branch


def _kept_before_page(problem: Problem, found: dict[str, Node | InvalidRecord]) -> bool:
    node = found.get(problem.node_id)
    cp = node.checkpoint if isinstance(node, Node) else None
    return (problem.kind == "bad_checkpoint" and cp is not None
            and cp.first_kept_id is not None and cp.first_kept_id not in found)


async def children_of(conn: AsyncConnection, tree_id: str, ids: Sequence[str]
                      ) -> list[RowMapping]:
    """The rows whose parent is one of `ids` (the forks starting on a page)."""
    cols = [nodes.c[name] for name in _NODE_COLUMNS]
    out: list[RowMapping] = []
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        stmt = select(*cols).where(nodes.c.tree_id == tree_id, nodes.c.parent_id.in_(chunk))
        out.extend((await conn.execute(stmt)).mappings().all())
    return out


async def load_full(
    conn: AsyncConnection, tree_id: str, leaf_id: str | None, revision: int
) -> Branch | DamagedBranch:
    """The whole branch from its root (for a UI and for audits)."""
    if leaf_id is None:
        return Branch(nodes=(), complete=True, revision=revision)
    found = await walk_up(conn, tree_id, leaf_id)
    return build_branch(found, leaf_id, revision=revision)
