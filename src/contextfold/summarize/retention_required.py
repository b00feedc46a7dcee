"""What a checkpoint summary must carry (SPEC S6): the required items of a folded span (the
user's constraints, decisions, next steps and statements, unresolved errors, what the previous
check carried, less what a correction retired) and the check's result (`Required`, `Check`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.text.identifiers import error_line
from ..core.values.messages import Node
from ..core.values.tool_calls import call_text
from ..core.values.tree import message_nodes
from .extractive_facts import STATEMENT_CHARS, is_request
from .extractive_sections import (
    Section,
)
from .grounding import Ungrounded
from .user_statements import clip_words, user_constraints, user_statements
from .user_words import split_typed, statement_of

# The order missing items are re-added in: what a resumed agent can least afford to lose.
# A statement is what the user typed in one message (SPEC S8), whatever its wording.
# A constraint is a sentence of one that reads as a rule (kept verbatim when its message is
# too long to carry whole).
PRIORITY: tuple[str, ...] = ("constraint", "decision", "next_step", "statement", "error")


_LISTED = 50  # evicted items and identifiers listed in the stored result


_CARRIED = 200  # most required items carried to the next check


@dataclass(frozen=True)
class Required:
    """One thing the checkpoint must carry: its kind, verbatim text and source node."""

    kind: str  # one of PRIORITY
    text: str
    node_id: str | None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "node_id": self.node_id}


@dataclass
class Check:
    """The result of checking one checkpoint summary (stored with the checkpoint)."""

    required: list[Required] = field(default_factory=list)
    readded: list[Required] = field(default_factory=list)
    evicted: list[Required] = field(default_factory=list)
    identifiers_folded: int = 0
    identifiers_kept: int = 0
    identifiers_evicted: list[dict[str, Any]] = field(default_factory=list)
    ungrounded: list[Ungrounded] = field(default_factory=list)
    # Statements the summary names by their node instead of carrying them (S8).
    named: list[Required] = field(default_factory=list)
    # Statements the summary carries: carried to the next check with their nodes, however
    # old, so a statement given up later can still be named by its node (S8).
    held: list[Required] = field(default_factory=list)

    @property
    def kept(self) -> list[Required]:
        out = {id(r) for r in self.evicted}
        return [r for r in self.required if id(r) not in out]

    def to_json(self) -> dict[str, Any]:
        """The stored form: counts, what was re-added and evicted (with node ids), the
        lines re-marked as inferred, and `carried` (what the next check requires)."""
        return {
            "order": list(PRIORITY),
            "required": len(self.required),
            "kept": len(self.kept),
            "readded": [r.to_json() for r in self.readded[:_LISTED]],
            "evicted": [r.to_json() for r in self.evicted[:_LISTED]],
            "evicted_count": len(self.evicted),
            "named": [r.to_json() for r in self.named[:_LISTED]],
            "named_count": len(self.named),
            "identifiers": {"folded": self.identifiers_folded,
                            "kept": self.identifiers_kept,
                            "evicted": self.identifiers_evicted[:_LISTED],
                            "evicted_count": len(self.identifiers_evicted)},
            "ungrounded": [u.to_json() for u in self.ungrounded],
            "carried": [r.to_json() for r in _unique([*self.held, *self.named,
                                                       *self.required[-_CARRIED:]])],
        }


def _unique(items: Sequence[Required]) -> list[Required]:
    seen: set[tuple[str, str]] = set()
    out = []
    for r in items:
        if (r.kind, r.text) not in seen:
            seen.add((r.kind, r.text))
            out.append(r)
    return out


def public_check(check: Mapping[str, Any]) -> dict[str, Any]:
    """The check as faces show it (`compact --json`): without the carried list."""
    return {k: v for k, v in check.items() if k != "carried"}


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


class _Normed(dict[str, str]):
    """`_norm` of each text, computed once per check (issue 26: every attempt of a check
    compares the same required items with the same summary items)."""

    def __missing__(self, text: str) -> str:
        value = self[text] = _norm(text)
        return value


class _Holders:
    """The last item of the sections (in order) whose normalised form contains a text,
    as a scan of every item finds it, by a search in each section's normalised items
    joined by line breaks (a normalised text holds none, so no match spans two items).

    A section's items are joined in blocks of at most `_BLOCK`, built when first searched:
    an item appended to a section rebuilds only its last block (issue 26: the check
    appends each missing item to its section, then searches again). Items are added
    through `add`; after any other change of a section's items, call `changed`.
    """

    _BLOCK = 64

    def __init__(self, ordered: Sequence[Section], norms: _Normed) -> None:
        self.ordered, self.norms = ordered, norms
        # id(section) -> blocks of (first item's index, joined forms, each form's start)
        self._blocks: dict[int, list[tuple[int, str, list[int]]]] = {}

    def _block(self, section: Section, first: int) -> tuple[int, str, list[int]]:
        forms = [self.norms[i] for i in section.items[first:first + self._BLOCK]]
        starts, at = [], 0
        for form in forms:
            starts.append(at)
            at += len(form) + 1
        return first, "\n".join(forms), starts

    def _index(self, section: Section) -> list[tuple[int, str, list[int]]]:
        blocks = self._blocks.get(id(section))
        if blocks is None:
            blocks = self._blocks[id(section)] = [
                self._block(section, first)
                for first in range(0, len(section.items), self._BLOCK)]
        return blocks

    def last(self, want: str) -> tuple[Section, str] | None:
        """The (section, item) holding `want` (normalised) that comes last, or None."""
        for section in reversed(self.ordered):
            for first, joined, starts in reversed(self._index(section)):
                at = joined.rfind(want)
                if at >= 0:
                    return section, section.items[first + bisect_right(starts, at) - 1]
        return None

    def add(self, section: Section, item: str) -> None:
        """`item` added to `section`, pinned (`Section.add`), the blocks kept true."""
        before = len(section.items)
        section.add([item], pin=True)
        if len(section.items) == before + 1:  # appended: no held item repeated it
            self._appended(section)
        else:
            self.changed(section)

    def _appended(self, section: Section) -> None:
        blocks = self._blocks.get(id(section))
        if blocks is None:
            return
        if blocks and len(blocks[-1][2]) < self._BLOCK:
            blocks[-1] = self._block(section, blocks[-1][0])
        else:
            blocks.append(self._block(section, len(section.items) - 1))

    def changed(self, section: Section) -> None:
        """`section`'s items changed otherwise: its blocks are built again when needed."""
        self._blocks.pop(id(section), None)


def _words(text: str) -> set[str]:
    return set(_norm(text).replace(",", " ").split())


def _retire_corrected(items: list[Required], correction: str) -> None:
    """A correction retires the user decision it corrects (most shared words, else the
    latest), as the offline summary replaces it."""
    decisions = [r for r in items if r.kind == "decision"]
    if not decisions:
        return
    words = _words(correction)
    best = max(reversed(decisions), key=lambda r: len(words & _words(r.text)))
    items.remove(best)


def required_items(nodes: Sequence[Node], carried: Sequence[Mapping[str, Any]] = ()
                   ) -> list[Required]:
    """What a checkpoint folding `nodes` must carry, oldest first (see the module doc)."""
    items: list[Required] = [
        Required(str(c.get("kind")), str(c.get("text")), c.get("node_id"))
        for c in carried if c.get("kind") in PRIORITY and c.get("text")]
    errors: dict[str, Required] = {}
    calls: dict[str, str] = {}  # call id -> how the call reads (its result comes later)
    for node, msg in message_nodes(nodes):
        if is_request(msg):
            said = statement_of(msg.text)
            typed = split_typed(msg.text).typed if said is not None else ""
            if said is not None:
                items.append(Required("statement", said, node.id))
            items += [Required("constraint", clip_words(s, STATEMENT_CHARS), node.id)
                      for s in user_constraints(typed)]
            decisions, steps, corrections = user_statements(typed)
            for s in corrections:
                _retire_corrected(items, s)
            items += [Required("decision", clip_words(s, STATEMENT_CHARS), node.id)
                      for s in (*corrections, *decisions)]
            items += [Required("next_step", clip_words(s, STATEMENT_CHARS), node.id)
                      for s in steps]
        for call in msg.tool_calls:
            calls[call.id] = call_text(call)
            errors.pop(calls[call.id], None)  # a new attempt: its result decides
        for result in msg.tool_results:
            key = calls.get(result.call_id, result.call_id)
            if result.is_error and (result.output or "").strip():
                errors[key] = Required("error", error_line(result.output, 200), node.id)
    items += errors.values()  # an error stays required until the same call is retried
    unique: dict[tuple[str, str], Required] = {}
    for r in items:
        unique.pop((r.kind, _norm(r.text)), None)
        unique[(r.kind, _norm(r.text))] = r
    return list(unique.values())
