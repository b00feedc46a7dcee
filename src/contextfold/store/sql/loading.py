"""Loading a branch from stored rows: the rules, whatever executes the SQL.

The store (SQLAlchemy, `queries.py`) and the read-only snapshot of the command line
(stdlib `sqlite3`, `snapshot.py`) fetch rows differently but must load the same branch,
report the same damage (SPEC D1, D2) and stop at the same checkpoint boundary: the
algorithms live here once and ask a `RowSource` for rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from contextfold.core.values.messages import Node
from contextfold.core.values.tree import Branch, DamagedBranch, InvalidRecord, Problem, build_branch

from .rows import CHAIN_MISMATCH, HASH_MISMATCH, chain_digest, chained_records, content_hash

Row = Mapping[str, Any]


class RowSource(Protocol):
    """The node reads the loaders need, each bounded by one `tree_id`. Rows carry the
    columns `tree_id, id, parent_id, created_at (aware UTC datetime), payload,
    content_hash, chain_hash`; `node_meta` the bookkeeping columns instead of the payload."""

    async def node_meta(self, tree_id: str, node_id: str) -> Row | None:
        """`id, parent_id, kind, role, depth, latest_checkpoint_id, first_kept_id,
        content_hash, chain_hash` of one node, or None."""
        ...

    async def walk_rows(self, tree_id: str, leaf_id: str, stop_id: str | None = None,
                        min_depth: int | None = None) -> Sequence[Row]:
        """The ancestor chain of `leaf_id`, ending at `stop_id`, a root or `min_depth`."""
        ...


def records(rows: Iterable[Row]) -> dict[str, Node | InvalidRecord]:
    """Rows read together, parsed and chain-checked (`rows.chained_records`)."""
    return chained_records(rows)


def readable_nodes(rows: Iterable[Row]) -> list[Node]:
    """The rows that parse and check out, in the order read (damage is reported by a
    branch load, not by a tree listing)."""
    return [n for n in records(rows).values() if isinstance(n, Node)]


def with_forks(shown: Sequence[Node], children: Iterable[Row]) -> list[Node]:
    """A page of the branch plus the first node of every fork off it (`children`: the
    rows whose parent is on the page), parents before children."""
    on_page = {n.id for n in shown}
    forks = [n for n in records(children).values()
             if isinstance(n, Node) and n.id not in on_page]
    return [*shown, *sorted(forks, key=lambda n: (n.created_at, n.id))]


async def walk_up(
    source: RowSource, tree_id: str, leaf_id: str, stop_id: str | None = None,
    min_depth: int | None = None,
) -> dict[str, Node | InvalidRecord]:
    """The ancestor chain of `leaf_id` within its tree, ending at `stop_id` or a root
    (or at depth `min_depth`: a page of the branch).

    Cost is proportional to the number of nodes walked (one index look-up each), never
    to the size of the tree.
    """
    return records(await source.walk_rows(tree_id, leaf_id, stop_id, min_depth))


async def history_problems(source: RowSource, tree_id: str,
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
    by_id = {row["id"]: row for row in await source.walk_rows(tree_id, start)}
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


async def is_damaged(source: RowSource, tree_id: str, leaf_id: str | None,
                     revision: int) -> bool:
    """Whether the session's branch holds damage, in its tail or in the summarised
    history before it (SPEC D2: such a session is read-only)."""
    if leaf_id is None:
        return False
    branch = await load_tail(source, tree_id, leaf_id, revision)
    return isinstance(branch, DamagedBranch) or bool(
        await history_problems(source, tree_id, branch))


async def load_tail(
    source: RowSource, tree_id: str, leaf_id: str | None, revision: int
) -> Branch | DamagedBranch:
    """What the model needs: from the latest checkpoint's boundary to the leaf (O(tail)).

    The leaf row names its latest checkpoint (computed at insert); that checkpoint's
    `first_kept_id` (or the checkpoint itself when nothing was kept raw) is where the walk
    stops. If the bookkeeping disagrees with what the walk finds, the full chain is loaded
    instead, so a wrong column can cost time but never hide history.
    """
    if leaf_id is None:
        return Branch(nodes=(), complete=True, revision=revision)
    leaf = await source.node_meta(tree_id, leaf_id)
    if leaf is None:
        problem = Problem("missing_leaf", leaf_id,
                          f"the session's latest node {leaf_id!r} is not stored")
        return DamagedBranch(readable=(), problems=(problem,))
    cp_id = leaf["latest_checkpoint_id"]
    stop: str | None = None
    if cp_id is not None:
        cp = await source.node_meta(tree_id, cp_id)
        if cp is not None and cp["kind"] == "checkpoint":
            stop = cp["first_kept_id"] or cp_id
    found = await walk_up(source, tree_id, leaf_id, stop)
    branch = build_branch(found, leaf_id, revision=revision, stop_at=stop)
    if stop is not None and isinstance(branch, Branch) and not branch.complete:
        latest = branch.latest_checkpoint
        if latest is None or latest.id != cp_id:
            return await load_full(source, tree_id, leaf_id, revision)
    return branch


async def load_page(
    source: RowSource, tree_id: str, leaf_id: str | None, revision: int, limit: int
) -> Branch | DamagedBranch:
    """The last `limit` nodes of the branch ending at `leaf_id` (a page for a UI).

    Bounded by the insert-time `depth` column, so it reads `limit` rows whatever the
    length of the history. `complete` is False when older nodes exist.
    """
    if leaf_id is None:
        return Branch(nodes=(), complete=True, revision=revision)
    leaf = await source.node_meta(tree_id, leaf_id)
    if leaf is None:
        problem = Problem("missing_leaf", leaf_id, f"node {leaf_id!r} is not stored")
        return DamagedBranch(readable=(), problems=(problem,))
    found = await walk_up(source, tree_id, leaf_id,
                          min_depth=max(0, leaf["depth"] - limit + 1))
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


async def load_full(
    source: RowSource, tree_id: str, leaf_id: str | None, revision: int
) -> Branch | DamagedBranch:
    """The whole branch from its root (for a UI and for audits)."""
    if leaf_id is None:
        return Branch(nodes=(), complete=True, revision=revision)
    found = await walk_up(source, tree_id, leaf_id)
    return build_branch(found, leaf_id, revision=revision)
