"""An auditor for a store: proves that history was never lost, rewritten or committed stale.

Reads every row (this is an audit, not a hot path) and checks:

* every node row still matches the hash written at insert (no UPDATE ever happened) and
  links to its parent's chain digest, parses,
  has its parent in its own tree, and has consistent insert-time columns;
* every acknowledged append is present exactly once, with the content that was sent;
* earlier snapshots are contained in later ones (no node vanished or changed, revisions
  only grew);
* each session's leaf-move log is gap-free from revision 0 to its current revision, each
  move starts where the previous ended, and every checkpoint commit was made for exactly the
  leaf and revision it moved from (no stale commit, SPEC C2);
* every checkpoint's `first_kept_id` is one of its ancestors;
* every session's leaf is a valid node and its model projection exports to a request that a
  provider accepts (`to_openai` + `openai_problems`).
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from contextfold.core.render.export import to_openai
from contextfold.core.render.validity import openai_problems
from contextfold.core.values.messages import Checkpoint, Message, Node
from contextfold.core.values.tree import Branch, InvalidRecord
from contextfold.core.view.projection import project

from ..sql.engine import read_connection
from ..sql.rows import chained_records, content_hash, payload_json
from ..sql.schema import compaction_leases, leaf_moves, nodes, sessions, trees

if TYPE_CHECKING:
    from ..sql_store import SqlSessionStore


def payload_digest(payload: Message | Checkpoint) -> str:
    """Digest of a payload as the store writes it: what a writer records when acknowledged."""
    return hashlib.sha256(payload_json(payload).encode("utf-8")).hexdigest()


def _row_digest(row: Mapping[str, Any]) -> str:
    """Hash of what a node row holds *now* (recomputed, never the stored hash column)."""
    return content_hash(row["id"], row["parent_id"], row["created_at"], row["payload"])


def _node_key(row: Mapping[str, Any]) -> str:
    """Node ids are unique per tree (imported ids may repeat across trees)."""
    return f"{row['tree_id']}/{row['id']}"


@dataclass(frozen=True)
class Snapshot:
    """Node content digests and session positions at one moment."""

    nodes: dict[str, str]
    sessions: dict[str, tuple[str | None, int]]


@dataclass
class InvariantReport:
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = "store invariants hold" if self.ok else f"{len(self.problems)} invariant problems"
        lines = [f"{head}: " + ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))]
        lines += [f"  - {p}" for p in self.problems[:50]]
        return "\n".join(lines)


async def take_snapshot(store: SqlSessionStore) -> Snapshot:
    async with read_connection(store.engine) as conn:
        node_rows = (await conn.execute(
            select(nodes.c.tree_id, nodes.c.id, nodes.c.parent_id, nodes.c.created_at,
                   nodes.c.payload)
        )).mappings().all()
        session_rows = await conn.execute(
            select(sessions.c.id, sessions.c.leaf_id, sessions.c.branch_revision))
        return Snapshot(
            nodes={_node_key(r): _row_digest(r) for r in node_rows},
            sessions={r[0]: (r[1], r[2]) for r in session_rows},
        )


async def dump_tables(store: SqlSessionStore, *, leases: bool = False) -> dict[str, list[tuple]]:
    """Every row of every durable table, in a stable order (to compare before/after)."""
    tables = [trees, nodes, sessions, leaf_moves] + ([compaction_leases] if leases else [])
    out: dict[str, list[tuple]] = {}
    async with read_connection(store.engine) as conn:
        for table in tables:
            rows = await conn.execute(select(table))
            out[table.name] = sorted(tuple(str(v) for v in row) for row in rows)
    return out


async def check_store(
    store: SqlSessionStore,
    *,
    acknowledged: Mapping[str, str] | None = None,
    snapshots: Sequence[Snapshot] = (),
    check_projections: bool = True,
) -> InvariantReport:
    """Audit the whole store. `acknowledged`: node id → `payload_digest` of every append a
    writer saw succeed. `snapshots`: taken earlier, oldest first."""
    report = InvariantReport()
    async with read_connection(store.engine) as conn:
        node_rows = (await conn.execute(select(nodes))).mappings().all()
        session_rows = (await conn.execute(select(sessions))).mappings().all()
        move_rows = (await conn.execute(
            select(leaf_moves).order_by(leaf_moves.c.session_id, leaf_moves.c.revision)
        )).mappings().all()
    by_tree: dict[str, dict[str, Node | InvalidRecord]] = defaultdict(dict)
    meta: dict[str, Mapping[str, Any]] = {}
    digests: Counter[str] = Counter()
    rows_by_tree: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in node_rows:
        rows_by_tree[row["tree_id"]].append(row)
        meta[row["id"]] = row  # acknowledged appends carry store-made (unique) ids
        digests[hashlib.sha256(row["payload"].encode("utf-8")).hexdigest()] += 1
    for tree_id, tree_rows in rows_by_tree.items():
        by_tree[tree_id] = dict(chained_records(tree_rows))  # hashes and the chain (0002)
        for record in by_tree[tree_id].values():
            if isinstance(record, InvalidRecord):
                report.problems.append(f"node {record.id}: {record.error}")
    check_topology(by_tree, {t: {r["id"]: r for r in rs} for t, rs in rows_by_tree.items()},
                    report)
    _check_acknowledged(acknowledged or {}, meta, digests, report)
    final = Snapshot(nodes={_node_key(r): _row_digest(r) for r in node_rows},
                     sessions={r["id"]: (r["leaf_id"], r["branch_revision"]) for r in session_rows})
    _check_snapshots([*snapshots, final], report)
    check_moves(session_rows, move_rows, by_tree, report)
    if check_projections:
        for row in session_rows:
            await _check_session(store, row, report)
    kinds = Counter(r["kind"] for r in node_rows)
    report.counts.update(nodes=len(node_rows), checkpoints=kinds["checkpoint"],
                         sessions=len(session_rows), moves=len(move_rows))
    for op, n in Counter(r["op"] for r in move_rows).items():
        report.counts[f"moves_{op}"] = n
    return report


def check_topology(by_tree: Mapping[str, Mapping[str, Node | InvalidRecord]],
                    tree_meta: Mapping[str, Mapping[str, Mapping[str, Any]]],
                    report: InvariantReport) -> None:
    for tree_id, members in by_tree.items():
        meta = tree_meta[tree_id]
        for node_id, record in members.items():
            row = meta[node_id]
            parent = row["parent_id"]
            if parent is None:
                if row["depth"] != 0:
                    report.problems.append(f"node {node_id}: root with depth {row['depth']}")
                continue
            if parent not in members:
                report.problems.append(f"node {node_id}: parent {parent} is not in tree {tree_id}")
                continue
            if row["depth"] != meta[parent]["depth"] + 1:
                report.problems.append(f"node {node_id}: depth does not follow its parent")
            expected_latest = node_id if row["kind"] == "checkpoint" else (
                meta[parent]["latest_checkpoint_id"])
            if row["latest_checkpoint_id"] != expected_latest:
                report.problems.append(f"node {node_id}: latest_checkpoint_id is inconsistent")
            cp = record.checkpoint if isinstance(record, Node) else None
            if cp is not None and cp.first_kept_id is not None and not _is_ancestor(
                members, cp.first_kept_id, node_id
            ):
                report.problems.append(
                    f"checkpoint {node_id}: first_kept_id {cp.first_kept_id} is not an ancestor")


def _is_ancestor(members: Mapping[str, Node | InvalidRecord], ancestor: str, node_id: str) -> bool:
    seen: set[str] = set()
    current = members[node_id].parent_id if node_id in members else None
    while current is not None and current not in seen:
        if current == ancestor:
            return True
        seen.add(current)
        record = members.get(current)
        current = record.parent_id if record is not None else None
    return False


def _check_acknowledged(acknowledged: Mapping[str, str], meta: Mapping[str, Mapping[str, Any]],
                        digests: Counter[str], report: InvariantReport) -> None:
    for node_id, digest in acknowledged.items():
        row = meta.get(node_id)
        if row is None:
            report.problems.append(f"acknowledged append {node_id} is missing")
            continue
        stored = hashlib.sha256(row["payload"].encode("utf-8")).hexdigest()
        if stored != digest:
            report.problems.append(f"acknowledged append {node_id} has different content")
        elif digests[digest] != 1:
            report.problems.append(
                f"acknowledged append {node_id} is stored {digests[digest]} times")
    report.counts["acknowledged"] = len(acknowledged)


def _check_snapshots(snapshots: Sequence[Snapshot], report: InvariantReport) -> None:
    for earlier, later in itertools.pairwise(snapshots):
        for key, digest in earlier.nodes.items():
            now, node_id = later.nodes.get(key), key.split("/", 1)[1]
            if now is None:
                report.problems.append(f"node {node_id} was deleted")
            elif now != digest:
                report.problems.append(f"node {node_id} was modified")
        for session_id, (_, revision) in earlier.sessions.items():
            if session_id not in later.sessions:
                report.problems.append(f"session {session_id} vanished")
            elif later.sessions[session_id][1] < revision:
                report.problems.append(f"session {session_id} revision went backwards")


def check_moves(session_rows: Sequence[Mapping[str, Any]],
                 move_rows: Sequence[Mapping[str, Any]],
                 by_tree: Mapping[str, Mapping[str, Node | InvalidRecord]],
                 report: InvariantReport) -> None:
    moves: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for move in move_rows:
        moves[move["session_id"]].append(move)
    for row in session_rows:
        sid, log = row["id"], moves.get(row["id"], [])
        if [m["revision"] for m in log] != list(range(len(log))):
            report.problems.append(f"session {sid}: leaf-move log has gaps or duplicates")
            continue
        if not log or log[-1]["revision"] != row["branch_revision"]:
            report.problems.append(f"session {sid}: revision {row['branch_revision']} does not "
                                   "match its leaf-move log")
            continue
        if log[-1]["to_leaf_id"] != row["leaf_id"]:
            report.problems.append(f"session {sid}: leaf is not where the last move put it")
        members = by_tree.get(row["tree_id"], {})
        for prev, move in itertools.pairwise(log):
            _check_move(sid, prev, move, members, report)


def _check_move(sid: str, prev: Mapping[str, Any], move: Mapping[str, Any],
                members: Mapping[str, Node | InvalidRecord], report: InvariantReport) -> None:
    where = f"session {sid} revision {move['revision']} ({move['op']})"
    if move["from_leaf_id"] != prev["to_leaf_id"]:
        report.problems.append(f"{where}: did not start from the previous leaf")
    node = members.get(move["node_id"]) if move["node_id"] else None
    if move["op"] == "commit":
        cp = node.checkpoint if isinstance(node, Node) else None
        if cp is None:
            report.problems.append(f"{where}: no checkpoint node")
            return
        if node.parent_id != move["planned_leaf_id"] or move["from_leaf_id"] != move[
            "planned_leaf_id"
        ]:
            report.problems.append(f"{where}: stale commit, planned for leaf "
                                   f"{move['planned_leaf_id']} but committed at "
                                   f"{move['from_leaf_id']}")
        if move["planned_revision"] != move["revision"] - 1:
            report.problems.append(f"{where}: stale commit, planned at revision "
                                   f"{move['planned_revision']}")
    elif move["op"] in ("append", "edit", "branch"):  # branch: a mirror's (SPEC Y1)
        if node is None or move["to_leaf_id"] != move["node_id"]:
            report.problems.append(f"{where}: the written node is not the new leaf")
        elif isinstance(node, Node) and node.checkpoint is not None:
            report.problems.append(f"{where}: a checkpoint was written by {move['op']} (C6)")
    elif move["op"] == "retry":
        to = move["to_leaf_id"]
        if to is not None and not _is_ancestor(members, to, move["from_leaf_id"]):
            report.problems.append(f"{where}: retry moved the leaf off its own ancestors")


async def _check_session(store: SqlSessionStore, row: Mapping[str, Any],
                         report: InvariantReport) -> None:
    sid = row["id"]
    branch = await store.load_branch(sid)
    full = await store.load_full_branch(sid)
    if not isinstance(branch, Branch) or not isinstance(full, Branch):
        damaged = branch if not isinstance(branch, Branch) else full
        report.problems.append(f"session {sid}: branch is damaged: "
                               + "; ".join(str(p) for p in damaged.problems))  # type: ignore[union-attr]
        return
    if branch.nodes != full.nodes[len(full.nodes) - len(branch.nodes):]:
        report.problems.append(f"session {sid}: the O(tail) load is not the end of the branch")
    projection = project(branch)
    if project(full) != projection:
        report.problems.append(f"session {sid}: O(tail) and full loads project differently")
    if projection.messages or projection.checkpoint is not None:
        problems = openai_problems(to_openai(projection).messages)
        if problems:
            report.problems.append(f"session {sid}: invalid request: {problems}")
