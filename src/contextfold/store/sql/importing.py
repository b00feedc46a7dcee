"""Validating a whole pre-built tree before it is imported (all-or-nothing).

Importers (Pi JSONL, Claude Code JSONL, ...) hand over every node of a tree, checkpoints
included. Everything is checked in memory first; nothing reaches the database unless the
whole tree is sound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contextfold.core.values.messages import Node
from contextfold.core.values.tree import Branch, build_branch

from ..errors import DuplicateNodeError, InvalidOperationError


@dataclass(frozen=True)
class PreparedNode:
    node: Node
    depth: int
    latest_checkpoint_id: str | None


def prepare_import(nodes: Sequence[Node], leaf_id: str) -> list[PreparedNode]:
    """Check the tree and compute each node's insert-time columns, parents first.

    Raises `InvalidOperationError` naming the first problem: a duplicate id, a parent not
    in the import, a parent cycle, a checkpoint whose `first_kept_id` is not its ancestor,
    or a leaf whose branch does not validate.
    """
    if not nodes:
        raise InvalidOperationError("import_tree needs at least one node")
    by_id: dict[str, Node] = {}
    for node in nodes:
        if not isinstance(node, Node):
            raise InvalidOperationError(
                f"import_tree takes core Node values, got {type(node).__name__}"
            )
        if node.id in by_id:
            raise InvalidOperationError(f"node id {node.id!r} appears twice in the import")
        by_id[node.id] = node
    if leaf_id not in by_id:
        raise InvalidOperationError(f"the latest node {leaf_id!r} is not one of the imported nodes")
    for node in nodes:
        if node.parent_id is not None and node.parent_id not in by_id:
            raise InvalidOperationError(
                f"node {node.id!r} has parent {node.parent_id!r}, which is not in the import "
                "(a tree is imported whole; parents in other trees are not allowed)"
            )
    prepared = _order_and_annotate(by_id)
    branch = build_branch(by_id, leaf_id)
    if not isinstance(branch, Branch):
        problems = "; ".join(str(p) for p in branch.problems)
        raise InvalidOperationError(f"the branch ending at {leaf_id!r} is damaged: {problems}")
    return prepared


def _order_and_annotate(by_id: dict[str, Node]) -> list[PreparedNode]:
    """Depth, latest checkpoint and a parents-first order for every node; detects cycles."""
    depth: dict[str, int] = {}
    latest: dict[str, str | None] = {}
    ordered: list[PreparedNode] = []
    for start in by_id:
        path: list[str] = []
        on_path: set[str] = set()
        current: str | None = start
        while current is not None and current not in depth:
            if current in on_path:
                raise InvalidOperationError(f"parent links of node {current!r} form a cycle")
            on_path.add(current)
            path.append(current)
            current = by_id[current].parent_id
        for node_id in reversed(path):
            node = by_id[node_id]
            parent = node.parent_id
            depth[node_id] = 0 if parent is None else depth[parent] + 1
            inherited = None if parent is None else latest[parent]
            latest[node_id] = node_id if node.checkpoint is not None else inherited
            _check_checkpoint(node, by_id, depth)
            ordered.append(PreparedNode(node, depth[node_id], inherited))
    return ordered


def _check_checkpoint(node: Node, by_id: dict[str, Node], depth: dict[str, int]) -> None:
    cp = node.checkpoint
    if cp is None or cp.first_kept_id is None:
        return
    target = cp.first_kept_id
    current = node.parent_id
    # Ancestors are annotated already; stop once below the target's depth.
    while current is not None and current != target:
        if target in depth and depth[current] < depth[target]:
            current = None
            break
        current = by_id[current].parent_id
    if current is None:
        raise InvalidOperationError(
            f"checkpoint {node.id!r} keeps raw history from {target!r}, which is not one of "
            "its ancestors"
        )


def already_imported(taken: Sequence[str], holders: Sequence[tuple[str, str | None]]
                     ) -> DuplicateNodeError:
    """The refusal of a re-import: how many nodes are stored with the same content, a few
    of their ids, and the session(s) holding them (id and title), so the user can open the
    one that is there instead of importing it again."""
    named = ", ".join(f"{sid} ({title!r})" if title else sid for sid, title in holders)
    where = f" in session {named}" if len(holders) == 1 else \
        f" in sessions {named}" if holders else ""
    return DuplicateNodeError(
        f"this history is already stored{where}: {len(taken)} imported nodes have the same "
        f"id and content (e.g. {', '.join(taken[:5])}); it was imported before"
        f"{': open that session instead' if holders else ''}", holders)
