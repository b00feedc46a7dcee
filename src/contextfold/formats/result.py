"""What an import returns: the durable nodes of the imported tree plus an honest report."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from contextfold.core.values.messages import Node

FORMATS = ("pi", "claude-code", "openai", "anthropic")


@dataclass(frozen=True)
class ImportResult:
    """An imported session, ready for the store's `import_tree(nodes, leaf_id)`.

    `nodes` is the whole tree with parents before children; `leaf_id` is the last entry of
    the session's active branch. Nothing is silently lost: entries that are not nodes are
    counted in `skipped` (by reason or entry type) and lines that could not be read are
    listed in `warnings` as ``"file:line: reason"``.
    """

    format: str
    nodes: tuple[Node, ...]
    leaf_id: str
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def messages(self) -> int:
        """Number of message nodes (user, assistant, tool, system)."""
        return sum(1 for n in self.nodes if n.kind == "message")

    @property
    def checkpoints(self) -> int:
        """Number of checkpoint nodes (imported compactions)."""
        return sum(1 for n in self.nodes if n.kind == "checkpoint")

    @property
    def title(self) -> str | None:
        """The title the recording gives itself: a Pi session's name, the latest of Claude
        Code's summary titles; None when it gives none."""
        titles = self.metadata.get("titles")
        named = self.metadata.get("name") or (titles[-1] if isinstance(titles, list) and
                                               titles else None)
        return named.strip()[:500] or None if isinstance(named, str) else None


def tool_pairing(result: ImportResult) -> Counter[str]:
    """Count calls with and without a result anywhere in the imported tree (for reports)."""
    calls: set[str] = set()
    answered: set[str] = set()
    for node in result.nodes:
        msg = node.message
        if msg is None:
            continue
        calls.update(c.id for c in msg.tool_calls)
        answered.update(r.call_id for r in msg.tool_results)
    return Counter(paired=len(calls & answered), unanswered=len(calls - answered),
                   orphan_results=len(answered - calls))
