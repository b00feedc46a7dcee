"""Fitting the offline summary to its token budget, visibly and fairly.

Trims the oldest unpinned items of the heaviest lists first, each trimmed item counted in
its section's "omitted" bullet; then shortens pinned items; then, as a last resort, keeps
only the headings. A budget too small for the headings is an error, never a silent cut.

Fair shares (SPEC S9): each kind of content (the goal and the user's words, decisions,
what is open next, critical context, findings, work done) has a floor, a share of the
budget. A list is trimmed only while its kind holds more than its floor, so what one kind
does not use spills over to the others, and no kind can evict another entirely. The
user's statements are trimmed by their score (how much each reads as an instruction, and
how recent it is), clipped head and tail with their node, and named by node when dropped.
"""

from __future__ import annotations

from ..core.text.text_estimate import Count
from ..errors import ContextfoldError
from .extractive_facts import norm_item
from .extractive_sections import _SHORTEST, CLIPPED, OMITTED_NOTE, Section, clip_item
from .user_words import directive_score

# SPEC S9: the share of the summary text each kind of content is sure of (when it needs
# it). The rest of the budget goes to whatever needs more, the user's words first.
FLOORS: dict[str, float] = {
    "user": 0.35, "decisions": 0.08, "next": 0.06, "critical": 0.10, "findings": 0.08,
    "progress": 0.08,
}


class SummaryBudgetTooSmall(ContextfoldError, ValueError):
    """The summary budget cannot hold even the section headings of the profile."""

    kind = "bad_input"  # the window is too small for this history: give a larger one


def render_sections(ordered: list[Section]) -> str:
    """The summary text: the sections in order, a blank line before each `##` heading."""
    blocks: list[str] = []
    for section in ordered:
        lines = section.lines()
        if section.heading.startswith("## ") and blocks:
            blocks.append("")
        blocks.extend(lines)
    return "\n".join(blocks).strip() + "\n"


def fit_sections(ordered: list[Section], budget: int, count: Count) -> str:
    """The rendered summary within `budget` tokens by `count`, trimming `ordered` in place.

    Trims by priority (`Section.rank`: done work and findings before decisions, the goal and
    the user's constraints last), the oldest unpinned item of the heaviest list of the
    lowest rank first. A long item is shortened just enough rather than dropped whole, and
    says that the rest is in the history. Pinned items are shortened, longest first, only
    when nothing else is left. Raises SummaryBudgetTooSmall when even the bare headings do
    not fit.
    """
    text = render_sections(ordered)
    if count(text) <= budget:
        return text
    for section in ordered:  # the note naming dropped statements: a tenth of the budget
        # (none in a budget so small only the bare headings and notes fit: the smallest
        # summary, which sizes the smallest window, must still hold)
        section.note_chars = budget * 3 // 10 if budget >= 600 else 0
    trim = _Trimmer(ordered, count)
    # Fast pass on per-item costs, then an exact pass re-measuring the whole text. Items
    # counted one by one add up to more than the text counted whole (each count rounds
    # up), so the fast pass aims at the budget in the per-item scale: it must not trim
    # what the whole text would have had room for.
    target = budget * trim.estimate() // max(1, count(text))
    trim.floors = {kind: int(share * target) for kind, share in FLOORS.items()}
    while (over := trim.estimate() - target) > 0 and trim.one(over):
        pass
    trim.sync()
    text = render_sections(ordered)
    while (over := count(text) - budget) > 0 and trim.one(over):
        trim.sync()
        text = render_sections(ordered)
    # Only pinned items are left: shorten the longest rather than lose any.
    while (over := count(text) - budget) > 0 and _shorten_longest(ordered, over, count):
        text = render_sections(ordered)
    if count(text) > budget:
        for s in ordered:
            for item in s.items:
                s.omit(item)
            s.items = []
            s.omitted_nodes = []  # the bare note: the smallest summary holds it (S8 gives way)
        text = render_sections(ordered)
    if count(text) > budget:
        raise SummaryBudgetTooSmall(
            f"a summary budget of {budget} tokens cannot hold the section headings "
            f"({count(text)} tokens); use a model with a larger output budget"
        )
    return text


def _shrunk(section: Section, item: str, item_cost: int, over: int) -> str | None:
    """`item` shortened to save about `over` tokens, or None when it should go whole."""
    if len(item) <= 2 * _SHORTEST or item_cost <= over:
        return None
    keep = max(_SHORTEST, int(len(item) * (item_cost - over) / item_cost) - len(CLIPPED) - 8)
    clipped = section.shorten(item, keep)
    return clipped if len(clipped) < len(item) else None


def _statement_order(items: list[str], free: list[int]) -> list[int]:
    """The user's statements in the order they give way: the lowest score first (how
    much each reads as an instruction to the agent, plus how recent it is)."""
    n = max(1, len(items))
    return sorted(free, key=lambda i: (directive_score(items[i].removeprefix("(user) "))
                                       + (i + 1) / n, i))


class _Trimmer:
    """The trimming state of every list, kept up to date as items go, so one trim costs
    O(lists) rather than O(items) (issue 26: re-scanning every item on each of thousands
    of trims made fitting quadratic in the facts folded).

    Per list: each item's cost, the positions of its unpinned items in order, a cursor at
    the oldest one still held, and their total cost. A dropped item is only marked; the
    section's `items` are rebuilt from the marks by `sync`, before the text is rendered.
    Which item goes, and how far one is shortened, is exactly what a full re-scan chooses:
    the oldest unpinned item of the heaviest list of the lowest rank, ties to the first.
    """

    def __init__(self, ordered: list[Section], count: Count) -> None:
        self.ordered, self.count = ordered, count
        self.note = count(f"- (999 {OMITTED_NOTE})\n")
        self.frame = count("\n".join(s.heading for s in ordered)) + len(ordered)
        self.cost = [[count(f"- {s.box}{i}\n") for i in s.items] for s in ordered]
        self.total = sum(sum(c) for c in self.cost)
        self.dropped: list[set[int]] = [set() for _ in ordered]
        # SPEC S9: tokens each kind holds, and the floor below which it is not trimmed
        # while another kind is over its own (none until `fit_sections` sets them).
        self.floors: dict[str, int] = {}
        self.held: dict[str, int] = {}
        self.items: dict[str, int] = {}  # items each kind still holds
        for s, costs in zip(ordered, self.cost, strict=True):
            self.held[s.kind] = self.held.get(s.kind, 0) + sum(costs)
            self.items[s.kind] = self.items.get(s.kind, 0) + len(costs)
        # A statement note grows with the nodes it names: its cost, per list, counted in
        # its kind's share (naming what the user said is part of the user's share).
        self.notes = [self._note_cost(s) for s in ordered]
        for s, note in zip(ordered, self.notes, strict=True):
            self.held[s.kind] += note
        self._index()

    def _note_cost(self, section: Section) -> int:
        if not section.omitted:
            return 0
        if section.statements and section.omitted_nodes:
            return self.count(f"- {section._note()}\n")
        return self.note

    def _index(self, only: int | None = None) -> None:
        """(Re)build the unpinned positions, cursors and weights (of list `only`, or all)."""
        if only is None:
            self.free: list[list[int]] = [[] for _ in self.ordered]
            self.head = [0] * len(self.ordered)
            self.weight = [0] * len(self.ordered)
        for n, s in enumerate(self.ordered):
            if only is None or n == only:
                free = [i for i, item in enumerate(s.items) if norm_item(item) not in s.pinned]
                if s.statements:
                    free = _statement_order(s.items, free)
                self.free[n], self.head[n] = free, 0
                self.weight[n] = sum(self.cost[n][i] for i in free)

    def estimate(self) -> int:
        """The summary's tokens by per-item costs: headings, items, omitted notes."""
        return self.frame + self.total + sum(self.notes)

    def _pick(self, over_floor: bool, keep_last: bool = True) -> int | None:
        best: int | None = None
        key: tuple[int, int] | None = None
        for n, s in enumerate(self.ordered):
            if self.head[n] >= len(self.free[n]):
                continue
            # While another kind can give, a kind keeps its floor and its last item.
            if over_floor and self.held.get(s.kind, 0) <= self.floors.get(s.kind, 0):
                continue
            if keep_last and self.items.get(s.kind, 0) <= 1:
                continue
            # Lowest rank first; within a rank, the most unpinned weight.
            k = (s.rank, -self.weight[n])
            if key is None or k < key:
                best, key = n, k
        return best

    def one(self, over: int) -> bool:
        """Shorten or drop the next item of the heaviest list of the lowest rank whose kind
        is over its floor (S9); when none is, of any list. The next item of a list is its
        oldest unpinned one; of the user's statements, the one of lowest score."""
        best = self._pick(over_floor=True) if self.floors else None
        if best is None and self.floors:  # every kind at its floor: keep one item each
            best = self._pick(over_floor=False)
        if best is None:
            best = self._pick(over_floor=False, keep_last=False)
        if best is None:
            return False
        n, section = best, self.ordered[best]
        i = self.free[n][self.head[n]]
        old = self.cost[n][i]
        shorter = _shrunk(section, section.items[i], old, over)
        if shorter is not None:
            section.items[i] = shorter
            new = self.count(f"- {section.box}{shorter}\n")
            self.cost[n][i] = new
            self.total += new - old
            self.weight[n] += new - old
            self.held[section.kind] += new - old
            if norm_item(shorter) in section.pinned:  # shortened into a pinned item's form
                self.head[n] += 1
                self.weight[n] -= new
            return True
        self.dropped[n].add(i)
        self.head[n] += 1
        self.total -= old
        self.weight[n] -= old
        self.held[section.kind] -= old
        self.items[section.kind] -= 1
        section.omit(section.items[i])
        note = self._note_cost(section)
        self.held[section.kind] += note - self.notes[n]
        self.notes[n] = note
        return True

    def sync(self) -> None:
        """Remove the dropped items from their sections (and re-index those lists)."""
        for n, gone in enumerate(self.dropped):
            if not gone:
                continue
            s = self.ordered[n]
            s.items = [item for i, item in enumerate(s.items) if i not in gone]
            self.cost[n] = [c for i, c in enumerate(self.cost[n]) if i not in gone]
            self.dropped[n] = set()
            self._index(n)


def _shorten_longest(ordered: list[Section], over: int, count: Count) -> bool:
    """Shorten the longest (pinned) item to save about `over` tokens, down to 20 chars."""
    longest: tuple[Section, int] | None = None
    for s in ordered:
        for i, item in enumerate(s.items):
            if longest is None or len(item) > len(longest[0].items[longest[1]]):
                longest = (s, i)
    if longest is None:
        return False
    section, i = longest
    item = section.items[i]
    body = len(item.removesuffix(CLIPPED))
    if body <= 20:
        return False
    item_cost = max(1, count(item))
    keep = max(20, min(body - 1, int(body * (item_cost - over) / item_cost) - 8))
    shorter = section.shorten(item, keep)
    if len(shorter) >= len(item):
        shorter = clip_item(item, keep)
    if len(shorter) >= len(item):
        return False
    if norm_item(item) in section.pinned:
        section.pinned.add(norm_item(shorter))
    section.items[i] = shorter
    return True
