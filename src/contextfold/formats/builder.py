"""Building an imported tree: mutable drafts, re-linking around skipped entries, the report.

Source formats hold entries that are not contextfold nodes (progress events, settings
changes, hook output) but may still be the parent of a real message. The builder keeps a
map from every source id to the node that represents it: the node itself, the node it was
merged into, or, for a skipped entry, its nearest kept ancestor. A child of a skipped
entry is thereby re-linked to that ancestor, so the chain stays connected and no node is
ever created with a dangling parent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from contextfold.core.values.messages import (
    Checkpoint,
    Message,
    MessageStatus,
    Node,
    Part,
    Role,
    ToolResultPart,
    Usage,
)
from contextfold.wire.parts import text_of

from .errors import ImportFormatError
from .reader import BadLine
from .result import ImportResult

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# What a malformed entry can raise while being converted: the importer skips that entry with
# a warning naming its line and the problem, and goes on (partially readable input).
ENTRY_ERRORS = (KeyError, TypeError, ValueError, AttributeError, ValidationError)


@dataclass
class Draft:
    """A node under construction: importers may still merge later entries into it."""

    id: str
    parent_id: str | None
    created_at: datetime
    line: int | None = None
    role: Role | None = None  # None for a checkpoint draft
    parts: list[Part] = field(default_factory=list)
    usage: Usage | None = None
    status: MessageStatus = "complete"
    model: str | None = None
    checkpoint: Checkpoint | None = None
    provider_message_id: str | None = None  # e.g. Anthropic `msg_...`, for merging split entries

    @property
    def result_ids(self) -> set[str]:
        return {p.call_id for p in self.parts if isinstance(p, ToolResultPart)}

    def freeze(self) -> Node:
        payload: Message | Checkpoint
        if self.checkpoint is not None:
            payload = self.checkpoint
        else:
            assert self.role is not None
            payload = Message(
                role=self.role,
                parts=tuple(self.parts),
                usage=self.usage,
                status=self.status,
                model=self.model,
            )
        return Node(id=self.id, parent_id=self.parent_id, created_at=self.created_at,
                    payload=payload)


class TreeBuilder:
    """Collects drafts, aliases, skip counts and warnings for one import."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.drafts: dict[str, Draft] = {}  # insertion order: parents before children
        self.alias: dict[str, str | None] = {}  # source id -> node id (None: before the root)
        self.skipped: Counter[str] = Counter()
        self.warnings: list[str] = []
        self.last_time: datetime = EPOCH

    # ---------------------------------------------------------------- reporting

    def warn(self, line: int | None, reason: str) -> None:
        where = f"{self.source}:{line}" if line is not None else self.source
        self.warnings.append(f"{where}: {reason}")

    def fatal(self, reason: str) -> ImportFormatError:
        """The import cannot go on; names the first thing that went wrong on the way (a line
        nested too deeply, an entry that did not convert), which is usually why."""
        first = next((w for w in self.warnings if "surrogate" not in w), None)
        detail = f" (first problem: line {first.removeprefix(self.source + ':')})" if first else ""
        return ImportFormatError(self.source, reason + detail)

    def unreadable(self, bad: Iterable[BadLine], repaired: Iterable[BadLine] = ()) -> None:
        """Report lines that could not be read at all (truncated, binary, not an object),
        and lines read after a repair (lone surrogates replaced; not counted as skipped)."""
        for item in bad:
            self.warn(item.line, item.reason)
            self.skipped["unreadable_line"] += 1
        for item in repaired:
            self.warn(item.line, item.reason)

    def skip(self, reason: str, source_id: str | None = None,
             parent: str | None = None) -> None:
        """Count a skipped entry; if it has an id, its children re-link to `parent`."""
        self.skipped[reason] += 1
        if source_id is not None and source_id not in self.alias:
            self.alias[source_id] = parent

    # ---------------------------------------------------------------- linking

    def resolve(self, source_id: str | None) -> str | None:
        """The node a child of `source_id` hangs from (None: it becomes a root)."""
        if source_id is None:
            return None
        if source_id in self.drafts:
            return source_id
        return self.alias.get(source_id)

    def add(self, draft: Draft) -> Draft:
        assert draft.parent_id is None or draft.parent_id in self.drafts, draft.parent_id
        self.drafts[draft.id] = draft
        return draft

    def merge_into(self, source_id: str, draft: Draft) -> None:
        """Record that the entry `source_id` was folded into `draft`."""
        if source_id != draft.id:
            self.alias[source_id] = draft.id

    def time(self, value: Any) -> datetime:
        """The entry's timestamp; a missing or bad one falls back to the previous entry's.

        Falling back (rather than to the clock) keeps re-imports identical and order intact.
        """
        parsed = parse_timestamp(value)
        if parsed is not None:
            self.last_time = parsed
            return parsed
        return self.last_time

    # ---------------------------------------------------------------- result

    def chain_to(self, node_id: str) -> list[str]:
        """Ids from the root down to `node_id` (inclusive)."""
        chain: list[str] = []
        current: str | None = node_id
        while current is not None:
            chain.append(current)
            current = self.drafts[current].parent_id
        chain.reverse()
        return chain

    def finish(self, fmt: str, leaf_source_id: str | None,
               metadata: dict[str, Any]) -> ImportResult:
        """Freeze the drafts; fatal when the input held no message at all."""
        if not any(d.checkpoint is None for d in self.drafts.values()):
            raise self.fatal(f"no conversation messages found in this {fmt} file")
        leaf = self.resolve(leaf_source_id)
        if leaf is None:
            leaf = next(reversed(self.drafts))
        nodes = tuple(d.freeze() for d in self.drafts.values())
        return ImportResult(
            format=fmt,
            nodes=nodes,
            leaf_id=leaf,
            skipped=dict(sorted(self.skipped.items())),
            warnings=tuple(self.warnings),
            metadata=metadata,
        )


# --------------------------------------------------------------------------- ordering

E = TypeVar("E")


@dataclass
class Linked(Generic[E]):
    """A source entry with its own id and its parent's id, in file order."""

    id: str
    parent: str | None
    line: int
    entry: E


def parents_first(items: Sequence[Linked[E]],
                  on_cycle: Callable[[Linked[E]], None]) -> Iterable[Linked[E]]:
    """Yield items so that each comes after its parent (when the parent is present).

    Files are written parents-first, so this is file order in practice; it only reorders
    if a file was concatenated or edited. A parent cycle is broken at the item whose
    parent closes the loop: that item becomes a root and `on_cycle` is told.
    """
    by_id: dict[str, Linked[E]] = {}
    for item in items:
        by_id.setdefault(item.id, item)
    done: set[str] = set()
    for item in items:
        path: list[Linked[E]] = []
        on_path: set[str] = set()
        current: Linked[E] | None = item
        while current is not None and current.id not in done:
            if current.id in on_path:
                last = path[-1]
                on_cycle(last)
                last.parent = None
                break
            path.append(current)
            on_path.add(current.id)
            current = by_id.get(current.parent) if current.parent is not None else None
        for linked in reversed(path):
            if linked.id not in done:
                done.add(linked.id)
                yield linked


def walk(b: TreeBuilder, items: Sequence[Linked[E]],
         handle: Callable[[Linked[E], str | None], None]) -> None:
    """Feed entries to `handle(item, parent_node_id)`, parents first.

    A parent that is not in the file makes the entry a root, a parent cycle is broken, and
    an entry whose conversion fails is skipped with a warning naming its line; its
    children then re-link to its nearest kept ancestor. Each case is reported, none fatal.
    """
    present = {item.id for item in items}

    def on_cycle(item: Linked[E]) -> None:
        b.warn(item.line, f"parent links of {item.id} form a cycle; treated as a root")

    for item in parents_first(items, on_cycle):
        parent = item.parent
        if parent is not None and parent not in present:
            b.warn(item.line, f"parent {parent} is not in the file; entry starts a root")
            parent = None
        resolved = b.resolve(parent)
        try:
            handle(item, resolved)
        except ENTRY_ERRORS as exc:
            kind = item.entry.get("type") if isinstance(item.entry, dict) else None
            b.warn(item.line, f"unreadable {kind!r} entry skipped ({describe(exc)})")
            b.skip("invalid_entry", item.id, resolved)


def describe(exc: BaseException) -> str:
    """One short line naming an entry's problem, for warnings."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


# --------------------------------------------------------------------------- values


def parse_timestamp(value: Any) -> datetime | None:
    """ISO-8601 text or epoch milliseconds -> aware datetime; None when unusable."""
    try:
        if isinstance(value, str) and value:
            parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(value / 1000, tz=UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return None


def note_model(models: dict[str, None], value: Any) -> str | None:
    """The model name of a recorded reply, remembered (in order) in `models`."""
    model = text_of(value)
    if model:
        models[model] = None
    return model
