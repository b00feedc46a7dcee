"""Branches: the validated ancestor chain of a leaf, and what is wrong when it is not valid.

A store hands the core a bag of nodes (possibly only the part near the leaf, SPEC "O(tail)
loading"); `build_branch` walks parent links up from the leaf and returns either a `Branch`
or a read-only `DamagedBranch` that keeps the readable part (SPEC D1-D2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import cast

from ...errors import ContextfoldError
from .messages import Checkpoint, Message, Node


@dataclass(frozen=True)
class InvalidRecord:
    """A stored row that failed validation; carried so damage can be reported, not hidden."""

    id: str
    parent_id: str | None
    error: str


@dataclass(frozen=True)
class Problem:
    kind: str  # missing_parent | cycle | invalid_node | bad_checkpoint | missing_leaf
    node_id: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} at {self.node_id}: {self.detail}"


# Keys of what a module derives from a branch and keeps in its `__dict__` (the way a
# cached_property does), to be handed on by `Branch.grown`; GROWN_FROM maps each to (how
# many nodes the shorter branch it was derived from had, the value).
DERIVED = frozenset({"_projection", "_provider_compaction_index"})
GROWN_FROM = "_grown_from"


@dataclass(frozen=True)
class Branch:
    """Nodes from the oldest loaded ancestor to the leaf, in order.

    `complete` is False when the store loaded only the part the model needs (everything from
    the latest checkpoint's `first_kept_id` on); the part before it is summarised already.
    `revision` is the session's `branch_revision` when the branch was read (SPEC C1).
    """

    nodes: tuple[Node, ...]
    complete: bool = True
    revision: int = 0

    @property
    def leaf(self) -> Node | None:
        return self.nodes[-1] if self.nodes else None

    @property
    def leaf_id(self) -> str | None:
        return self.nodes[-1].id if self.nodes else None

    @cached_property
    def index(self) -> dict[str, int]:
        return {node.id: i for i, node in enumerate(self.nodes)}

    def position(self, node_id: str) -> int | None:
        return self.index.get(node_id)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.index

    @cached_property
    def latest_checkpoint_index(self) -> int | None:
        for i in range(len(self.nodes) - 1, -1, -1):
            if isinstance(self.nodes[i].payload, Checkpoint):
                return i
        return None

    def grown(self, nodes: Iterable[Node]) -> Branch:
        """This branch with `nodes` appended at its leaf (one leaf move: revision + 1).

        What was derived from this branch and stays true when only messages follow it (the
        latest checkpoint's index, `projection.project` and the index of a provider's
        compaction) is handed on, so the longer branch derives it from the new nodes
        alone, not from every node again (issue 26: a mirrored session grows at the leaf on
        every request). The hand-over holds derived values only, never this branch."""
        added = tuple(nodes)
        out = Branch(nodes=(*self.nodes, *added), complete=self.complete,
                     revision=self.revision + 1)
        if all(isinstance(n.payload, Message) for n in added):
            known = self.__dict__
            if "latest_checkpoint_index" in known:
                out.__dict__["latest_checkpoint_index"] = known["latest_checkpoint_index"]
            # Values derived from this branch, or handed to it and not derived since (two
            # messages-only steps in a row: the nodes after their start are messages too).
            carried = dict(known.get(GROWN_FROM, {}))
            carried.update((k, (len(self.nodes), v)) for k, v in known.items() if k in DERIVED)
            if carried:
                out.__dict__[GROWN_FROM] = carried
        return out

    @property
    def latest_checkpoint(self) -> Node | None:
        i = self.latest_checkpoint_index
        return None if i is None else self.nodes[i]


@dataclass(frozen=True)
class DamagedBranch:
    """Read-only view of a session whose stored topology is broken (SPEC D1-D2).

    `readable` holds the chain from the leaf up to the first break, oldest first.
    """

    readable: tuple[Node, ...]
    problems: tuple[Problem, ...] = field(default_factory=tuple)

    @property
    def read_only(self) -> bool:
        return True


class BranchError(ContextfoldError, ValueError):
    """Raised when an operation needs a healthy branch and got a damaged one."""

    kind = "read_only"  # a damaged branch is read, never written (SPEC D2)


def build_branch(
    nodes: Mapping[str, Node | InvalidRecord] | Iterable[Node | InvalidRecord],
    leaf_id: str,
    *,
    revision: int = 0,
    stop_at: str | None = None,
) -> Branch | DamagedBranch:
    """Walk parent links from `leaf_id` and validate the chain.

    `stop_at`: the id where a partial load legitimately ends (the latest checkpoint's
    `first_kept_id`, or the checkpoint itself when nothing was kept raw); reaching it is not
    a missing parent. Without it, the chain must end at a root (`parent_id is None`).
    """
    by_id: Mapping[str, Node | InvalidRecord]
    if isinstance(nodes, Mapping):  # a Mapping is also an Iterable of its keys: say which
        by_id = cast("Mapping[str, Node | InvalidRecord]", nodes)
    else:
        by_id = {n.id: n for n in nodes}
    chain: list[Node] = []
    seen: set[str] = set()
    problems: list[Problem] = []
    current: str | None = leaf_id
    complete = True
    while current is not None:
        if current in seen:
            problems.append(Problem("cycle", current, "parent links loop back to this node"))
            break
        seen.add(current)
        record = by_id.get(current)
        if record is None:
            kind = "missing_leaf" if not chain else "missing_parent"
            child = chain[-1].id if chain else current
            problems.append(Problem(kind, child, f"node {current!r} is not stored"))
            break
        if isinstance(record, InvalidRecord):
            problems.append(Problem("invalid_node", record.id, record.error))
            break
        chain.append(record)
        if stop_at is not None and record.id == stop_at:
            complete = record.parent_id is None
            break
        current = record.parent_id
    chain.reverse()
    if not problems:
        problems.extend(_checkpoint_problems(chain, complete))
    if problems:
        return DamagedBranch(readable=tuple(chain), problems=tuple(problems))
    return Branch(nodes=tuple(chain), complete=complete, revision=revision)


def _checkpoint_problems(chain: list[Node], complete: bool) -> list[Problem]:
    """Every checkpoint's first_kept_id must be one of its ancestors on this chain."""
    problems: list[Problem] = []
    positions = {node.id: i for i, node in enumerate(chain)}
    for i, node in enumerate(chain):
        cp = node.checkpoint
        if cp is None or cp.first_kept_id is None:
            continue
        kept_at = positions.get(cp.first_kept_id)
        if kept_at is None:
            # An older checkpoint of a partial load may point before the loaded part.
            if complete or i == _latest_checkpoint_pos(chain):
                problems.append(
                    Problem("bad_checkpoint", node.id, f"first_kept_id {cp.first_kept_id!r} "
                            "is not an ancestor of this checkpoint")
                )
        elif kept_at >= i:
            problems.append(
                Problem("bad_checkpoint", node.id, "first_kept_id is not before the checkpoint")
            )
    return problems


def _latest_checkpoint_pos(chain: list[Node]) -> int | None:
    for i in range(len(chain) - 1, -1, -1):
        if chain[i].checkpoint is not None:
            return i
    return None


# --------------------------------------------------------------------------- stability


@dataclass(frozen=True)
class Stability:
    """Whether the tool workflow at the leaf is settled enough to checkpoint (SPEC A2)."""

    stable: bool
    reasons: tuple[str, ...] = ()


def check_stability(branch: Branch) -> Stability:
    """Look at the current turn (from the last user message to the leaf).

    Unstable: a message still streaming, a tool call of a completed reply with no result
    yet, a pending approval. An errored or aborted reply is closed: its calls will never get
    results, so they are void rather than open (the projection drops them).
    """
    reasons: list[str] = []
    open_calls: dict[str, str] = {}
    approvals: dict[str, str] = {}  # call id -> latest state; a later decision settles it
    start = 0
    for i in range(len(branch.nodes) - 1, -1, -1):
        if branch.nodes[i].is_user_message:
            start = i
            break
    for node in branch.nodes[start:]:
        msg = node.message
        if msg is None:
            continue
        if msg.status == "streaming":
            reasons.append(f"message {node.id} is still streaming")
        if not msg.is_closed_without_result:
            for call in msg.tool_calls:
                open_calls[call.id] = call.name
        for result in msg.tool_results:
            open_calls.pop(result.call_id, None)
        for approval in msg.approvals:
            approvals[approval.call_id] = approval.state
    reasons.extend(
        f"approval for tool call {call_id} is pending"
        for call_id, state in approvals.items()
        if state == "pending"
    )
    for call_id, name in open_calls.items():
        reasons.append(f"tool call {call_id} ({name}) has no result yet")
    return Stability(stable=not reasons, reasons=tuple(reasons))


def message_nodes(nodes: Iterable[Node]) -> list[tuple[Node, Message]]:
    """The message nodes among `nodes`, paired with their message (checkpoints skipped)."""
    return [(n, n.payload) for n in nodes if isinstance(n.payload, Message)]
