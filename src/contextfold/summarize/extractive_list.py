"""One list of the offline summary (`Section`): its items in order (a repeated item is recent
again; a statement repeated nearly word for word is carried once), what was omitted for size and
the nodes it names, an item clipped for size, and a previous summary's lists read back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..core.values.tool_calls import ITEM_CHARS
from .extractive_facts import norm_item
from .user_words import clip_statement, clipped_node, directive_score

OMITTED_NOTE = "earlier items omitted for size; the durable history has them"
# The retention check's line naming what it could not fit (SPEC S6): written anew by each
# check, so a summary built on the previous one leaves the old line out.
RECALL_PREFIX = "[Recall] Folded and not repeated here for size; in the history:"
# The user section's note for statements it could not carry (SPEC S8, S9): each is named
# by its node, so nothing the user said is dropped silently.
STATEMENTS_NOTE = ("more of the user's messages, not repeated for size; whole in the history "
                   "at nodes")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s*)?")
_OMITTED = re.compile(r"^\((\d+) earlier items? omitted for size")
_STATEMENTS_OMITTED = re.compile(
    r"^\((\d+) more of the user's messages, not repeated for size; whole in the history at "
    r"nodes ([^)]*?)(?:,? and \d+ more)?\)$")
# The most node ids one note names; the count says how many more there are.
NAMED_NODES = 60


# Appended to an item shortened for size; an item shortened again keeps one mark.
CLIPPED = " … [shortened for size; the full text is in the history]"
# An item at most this long is dropped whole rather than shortened.
_SHORTEST = ITEM_CHARS


def clip_item(item: str, chars: int) -> str:
    """`item` cut to about `chars` characters at a word boundary, marked as shortened."""
    body = item.removesuffix(CLIPPED)
    if len(body) <= chars:
        return item
    cut = body[:chars]
    space = cut.rfind(" ")
    if space > chars // 2:
        cut = cut[:space]
    return cut.rstrip() + CLIPPED


# --------------------------------------------------------------------------- sections


@dataclass
class Section:
    """One rendered list: a section, or one Progress subsection."""

    heading: str  # "## Name" or "### Sub"
    items: list[str] = field(default_factory=list)
    pinned: set[str] = field(default_factory=set)  # normalised items never trimmed
    omitted: int = 0
    box: str = ""  # "[x] " / "[ ] " for Done / In Progress
    parent: bool = False  # a "## Progress" heading whose lists are the subsections
    rank: int = 0  # trim priority: lists of a lower rank are trimmed first (`RANKS`)
    kind: str = "progress"  # the share of the budget it draws on (SPEC S9, `KINDS`)
    # The user's statements (SPEC S8): shown newest first, trimmed by their score, clipped
    # head and tail with their node, and named by node when they do not fit.
    statements: bool = False
    sources: dict[str, str] = field(default_factory=dict)  # normalised item -> node id
    omitted_nodes: list[str] = field(default_factory=list)  # statements not carried
    # How telling each not-carried statement was (the note names the most telling first).
    omitted_rank: dict[str, float] = field(default_factory=dict)
    note_chars: int = 2_400  # the most the note naming them may take (set when fitting)

    def add(self, items: Iterable[str], *, pin: bool = False) -> None:
        """Append `items` (skipping empty ones); `pin` keeps them from being trimmed."""
        # A repeated item moves to the end: it is recent again, so trimmed last. Done for
        # the whole batch at once (one pass over the held items, not one per new item:
        # issue 26), with the same result as adding one by one: the held items no new one
        # repeats, then the new ones in the order of their last occurrence.
        new: dict[str, str] = {}
        for item in items:
            key = norm_item(item)
            if not key or key in ("(none)", "none"):
                continue
            new.pop(key, None)
            new[key] = item
            if pin:
                self.pinned.add(key)
        if new:
            self.items = [i for i in self.items if norm_item(i) not in new]
            if self.statements:
                self.items = _without_near_duplicates(self.items, new)
            self.items.extend(new.values())

    def add_statement(self, item: str, node_id: str | None) -> None:
        """Add one of the user's statements with the node it came from."""
        if node_id:
            self.sources[norm_item(item)] = node_id
        self.add([item])

    def node_of(self, item: str) -> str | None:
        """The node a statement came from, when known."""
        return self.sources.get(norm_item(item)) or clipped_node(item)

    def omit(self, item: str) -> None:
        """Count `item` as trimmed; a statement is also named by its node."""
        self.omitted += 1
        node = self.node_of(item) if self.statements else None
        if node and node not in self.omitted_nodes:
            self.omitted_nodes.append(node)
            self.omitted_rank[node] = directive_score(item.removeprefix("(user) "))

    def shorten(self, item: str, chars: int) -> str:
        """`item` cut to about `chars`: the user's words (a statement, the task) head and
        tail with their node (S8), anything else its head with a mark that the rest is in
        the history."""
        node = self.node_of(item) if item.startswith("(user) ") else None
        if not (self.statements or node):
            return clip_item(item, chars)
        body = item.removeprefix("(user) ")
        clipped = "(user) " + clip_statement(body, chars, node) if node else clip_item(item, chars)
        if node:
            self.sources[norm_item(clipped)] = node
        return clipped

    def _note(self) -> str:
        if not (self.statements and self.omitted_nodes and self.note_chars):
            return f"({self.omitted} {OMITTED_NOTE})"
        shown: list[str] = []
        size = 0
        # The most telling first (S8's ranking aid), then the newest; a node named by an
        # earlier checkpoint keeps its place among those of a middling score.
        order = sorted(range(len(self.omitted_nodes)), key=lambda i: (
            -self.omitted_rank.get(self.omitted_nodes[i], 2.0 - i / 1e4), -i))
        for node in [self.omitted_nodes[i] for i in order][:NAMED_NODES]:
            if shown and size + len(node) + 2 > self.note_chars:
                break
            shown.append(node)
            size += len(node) + 2
        more = max(0, self.omitted - len(shown))
        return (f"({self.omitted} {STATEMENTS_NOTE} {', '.join(shown)}"
                + (f", and {more} more)" if more else ")"))

    def lines(self) -> list[str]:
        """The heading and its bullets, with the count of trimmed items, or "(none)"."""
        out = [self.heading]
        if self.parent:
            return out
        items = self.items[::-1] if self.statements else self.items
        bullets = [f"- {self.box}{item}" for item in items]
        if self.statements and self.omitted:
            out += [*bullets, f"- {self._note()}"]
            return out
        if self.omitted:
            # After the pinned lead items (the original goal), before the rest.
            lead = 0
            while lead < len(self.items) and norm_item(self.items[lead]) in self.pinned:
                lead += 1
            bullets.insert(lead, f"- ({self.omitted} {OMITTED_NOTE})")
        out += bullets
        if not self.items and not self.omitted:
            out.append("- (none)")
        return out


def _without_near_duplicates(held: list[str], new: dict[str, str]) -> list[str]:
    """`held` without the statements a new one repeats nearly word for word (S9: the same
    rule said twice is carried once, in its newest wording)."""
    fresh = [_word_set(item) for item in new.values()]
    fresh = [w for w in fresh if len(w) >= 6]
    if not fresh:
        return held
    return [item for item in held
            if not any(_similar(_word_set(item), w) for w in fresh)]


def _word_set(item: str) -> frozenset[str]:
    return frozenset(_WORDS.findall(item.casefold()))


def _similar(a: frozenset[str], b: frozenset[str]) -> bool:
    return len(a) >= 6 and len(a & b) >= 0.85 * len(a | b)


def _parse_previous(body: str) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Bullets of one previous section body, by subsection ("" = the section itself)."""
    items, omitted, _ = _parse_body(body)
    return items, omitted


def _parse_body(body: str) -> tuple[dict[str, list[str]], dict[str, int], list[str]]:
    """Bullets, omitted counts (by subsection) and the statement nodes a note names."""
    items: dict[str, list[str]] = {"": []}
    omitted: dict[str, int] = {}
    nodes: list[str] = []
    current = ""
    for raw in body.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("###"):
            current = line.lstrip("#").strip()
            items.setdefault(current, [])
            continue
        m = _BULLET.match(line)
        text = line[m.end():] if m else line
        om = _OMITTED.match(text)
        named = _STATEMENTS_OMITTED.match(text)
        if named:
            omitted[current] = omitted.get(current, 0) + int(named.group(1))
            # Oldest first inside, as `Section.omitted_nodes` holds them.
            nodes += [n.strip() for n in named.group(2).split(",") if n.strip()][::-1]
        elif om:
            omitted[current] = omitted.get(current, 0) + int(om.group(1))
        elif m or not items[current]:
            items[current].append(text)
        else:
            items[current][-1] += " " + text  # a wrapped continuation line
    return items, omitted, nodes


_WORDS = re.compile(r"\w+")
