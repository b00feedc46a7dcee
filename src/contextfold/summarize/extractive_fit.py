"""Fitting the offline summary to its token budget, visibly.

Trims the oldest unpinned items of the heaviest lists first, each trimmed item counted in
its section's "omitted" bullet; then shortens pinned items; then, as a last resort, keeps
only the headings. A budget too small for the headings is an error, never a silent cut.
"""

from __future__ import annotations

from ..core.text_estimate import Count
from ..core.tool_calls import ITEM_CHARS
from ..errors import ContextfoldError
from .extractive_facts import norm_item
from .extractive_sections import OMITTED_NOTE, Section


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
    cost = {id(s): [count(f"- {s.box}{i}\n") for i in s.items] for s in ordered}
    note = count(f"- (999 {OMITTED_NOTE})\n")
    frame = count("\n".join(s.heading for s in ordered)) + len(ordered)

    def estimate() -> int:
        lists = sum(sum(c) for c in cost.values())
        return frame + lists + note * sum(1 for s in ordered if s.omitted)

    # Fast pass on per-item costs, then an exact pass re-measuring the whole text. Items
    # counted one by one add up to more than the text counted whole (each count rounds
    # up), so the fast pass aims at the budget in the per-item scale: it must not trim
    # what the whole text would have had room for.
    target = budget * estimate() // max(1, count(text))
    while (over := estimate() - target) > 0 and _trim_one(ordered, cost, over, count):
        pass
    text = render_sections(ordered)
    while (over := count(text) - budget) > 0 and _trim_one(ordered, cost, over, count):
        text = render_sections(ordered)
    # Only pinned items are left: shorten the longest rather than lose any.
    while (over := count(text) - budget) > 0 and _shorten_longest(ordered, over, count):
        text = render_sections(ordered)
    if count(text) > budget:
        for s in ordered:
            s.omitted += len(s.items)
            s.items = []
        text = render_sections(ordered)
    if count(text) > budget:
        raise SummaryBudgetTooSmall(
            f"a summary budget of {budget} tokens cannot hold the section headings "
            f"({count(text)} tokens); use a model with a larger output budget"
        )
    return text


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


def _shrunk(item: str, item_cost: int, over: int) -> str | None:
    """`item` shortened to save about `over` tokens, or None when it should go whole."""
    if len(item) <= 2 * _SHORTEST or item_cost <= over:
        return None
    keep = max(_SHORTEST, int(len(item) * (item_cost - over) / item_cost) - len(CLIPPED) - 8)
    clipped = clip_item(item, keep)
    return clipped if len(clipped) < len(item) else None


def _trim_one(ordered: list[Section], cost: dict[int, list[int]], over: int,
              count: Count) -> bool:
    """Shorten or drop the oldest unpinned item of the heaviest list of the lowest rank."""
    best: tuple[Section, int] | None = None
    key: tuple[int, int] | None = None
    for s in ordered:
        costs = cost[id(s)]
        free = [i for i, item in enumerate(s.items) if norm_item(item) not in s.pinned]
        if not free:
            continue
        # Lowest rank first; within a rank, the most unpinned weight.
        k = (s.rank, -sum(costs[i] for i in free))
        if key is None or k < key:
            best, key = (s, free[0]), k
    if best is None:
        return False
    section, i = best
    shorter = _shrunk(section.items[i], cost[id(section)][i], over)
    if shorter is not None:
        section.items[i] = shorter
        cost[id(section)][i] = count(f"- {section.box}{shorter}\n")
        return True
    del section.items[i]
    del cost[id(section)][i]
    section.omitted += 1
    return True


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
    section.items[i] = clip_item(item, keep)
    return True
