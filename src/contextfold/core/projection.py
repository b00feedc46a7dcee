"""The model projection: latest checkpoint summary, the kept tail in place, then what followed.

SPEC T2-T4: the tail is read where it stands in the tree (never copied), only the latest
checkpoint on the chain is projected, and older checkpoints never add to the context.
"""

from __future__ import annotations

from dataclasses import dataclass

from .messages import Checkpoint, Ledger, Message, Node
from .tree import Branch

SUMMARY_HEADER = (
    "[contextfold checkpoint] The earlier part of this conversation was compacted. "
    "This is a structured summary of it; the messages after it continue verbatim."
)


@dataclass(frozen=True)
class Projection:
    """What the next request contains, besides the system prompt and tools."""

    checkpoint: Node | None
    messages: tuple[Node, ...]
    # Index into `messages` where the nodes written after the checkpoint begin: only their
    # usage reflects a request that contained the current summary (SPEC E1).
    after_checkpoint: int = 0

    @property
    def summary(self) -> Checkpoint | None:
        return self.checkpoint.checkpoint if self.checkpoint is not None else None

    @property
    def message_count(self) -> int:
        return len(self.messages)


def raw_start(branch: Branch) -> int:
    """Index in `branch.nodes` where raw (unsummarised) history starts.

    After a checkpoint with `first_kept_id`, that node; after one with nothing kept raw
    (SPEC K3), the node after the checkpoint; with no checkpoint, the beginning.
    """
    ci = branch.latest_checkpoint_index
    if ci is None:
        return 0
    cp = branch.nodes[ci].checkpoint
    assert cp is not None
    if cp.first_kept_id is None:
        return ci + 1
    # Scan back from the checkpoint: the kept tail is near it, so this costs O(tail),
    # not O(history) as a full index of the branch would.
    for i in range(ci - 1, -1, -1):
        if branch.nodes[i].id == cp.first_kept_id:
            return i
    raise ValueError(f"first_kept_id {cp.first_kept_id!r} is not on the branch")


def project(branch: Branch) -> Projection:
    """Derive the projection of a healthy branch."""
    ci = branch.latest_checkpoint_index
    start = raw_start(branch)
    if ci is None:
        raw = tuple(n for n in branch.nodes if isinstance(n.payload, Message))
        return Projection(checkpoint=None, messages=raw)
    before = tuple(n for n in branch.nodes[start:ci] if isinstance(n.payload, Message))
    after = tuple(n for n in branch.nodes[max(start, ci + 1) :] if isinstance(n.payload, Message))
    return Projection(
        checkpoint=branch.nodes[ci], messages=before + after, after_checkpoint=len(before)
    )


LEDGER_NOTE_CHARS = 60
LEDGER_CONSTRAINT = 2  # LedgerEntry.priority of an identifier named in a user's constraint


def render_ledger(ledger: Ledger) -> str:
    """The identifier ledger as plain text the model can read and copy from.

    One line per kind, identifiers separated by semicolons: a key costs a few tokens, not
    a line, so a research session's dozens of annotation keys all fit the ledger's budget.
    Identifiers the user named in a constraint come first, with the user's rule itself
    ("[user constraint] Never overwrite refs/library.bib."), so the rule survives any
    summariser; under pressure the rule's text goes before its identifiers do.
    """
    if not ledger.entries:
        return ""
    rules: dict[str, list[str]] = {}  # the user's rule -> identifiers it names
    groups: dict[str, list[str]] = {}
    for e in ledger.entries:
        note = " ".join(e.note.split())
        if e.priority >= LEDGER_CONSTRAINT:
            if note:
                rules.setdefault(note, []).append(e.value)
            else:
                groups.setdefault(f"{e.kind} [user constraint]", []).append(e.value)
            continue
        if len(note) > LEDGER_NOTE_CHARS:
            note = note[: LEDGER_NOTE_CHARS - 1] + "…"
        groups.setdefault(e.kind, []).append(f"{e.value} ({note})" if note else e.value)
    lines = ["## Identifier Ledger (verbatim identifiers carried forward)"]
    for rule, values in rules.items():
        missing = [v for v in values if v not in rule]  # the rule was cut short
        lines.append(f"- [user constraint] {rule}" + (f" ({'; '.join(missing)})"
                                                         if missing else ""))
    constrained = [k for k in groups if k.endswith("[user constraint]")]
    for kind in [*constrained, *(k for k in groups if k not in constrained)]:
        lines.append(f"- {kind}: " + "; ".join(groups[kind]))
    if ledger.evicted:
        lines.append(f"({len(ledger.evicted)} older identifiers were dropped for size; "
                     "they remain in the durable history.)")
    return "\n".join(lines)


def checkpoint_text(cp: Checkpoint) -> str:
    """The summary message body exactly as the model sees it."""
    parts = [SUMMARY_HEADER, "", cp.summary.strip()]
    ledger = render_ledger(cp.ledger)
    if ledger:
        parts += ["", ledger]
    return "\n".join(parts)
