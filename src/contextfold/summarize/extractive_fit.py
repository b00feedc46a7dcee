"""Fitting the offline summary to its token budget, visibly.

Trims the oldest unpinned items of the heaviest lists first, each trimmed item counted in
its section's "omitted" bullet; then shortens pinned items; then, as a last resort, keeps
only the headings. A budget too small for the headings is an error, never a silent cut.
"""

from __future__ import annotations

from ..core.text_estimate import Count
from ..core.tool_calls import ITEM_CHARS, one_line
from .extractive_facts import norm_item
from .extractive_sections import OMITTED_NOTE, Section


class SummaryBudgetTooSmall(ValueError):
    """The summary budget cannot hold even the section headings of the profile."""


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

    Raises SummaryBudgetTooSmall when even the bare headings do not fit.
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

    # Fast pass on per-item costs: drop the oldest unpinned item of the heaviest list.
    while estimate() > budget and _drop_one(ordered, cost):
        pass
    # Exact pass: re-measure the whole text, dropping one more item while it is over.
    text = render_sections(ordered)
    while count(text) > budget and _drop_one(ordered, cost):
        text = render_sections(ordered)
    limit = ITEM_CHARS
    while count(text) > budget and limit > 20:
        # Only pinned items are left: shorten them rather than lose them.
        limit //= 2
        for s in ordered:
            s.items = [one_line(i, limit) for i in s.items]
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


def _drop_one(ordered: list[Section], cost: dict[int, list[int]]) -> bool:
    """Drop the oldest unpinned item of the list with the most unpinned weight."""
    best: tuple[Section, int] | None = None
    weight = -1
    for s in ordered:
        costs = cost[id(s)]
        if s.pinned:
            free = [i for i, item in enumerate(s.items) if norm_item(item) not in s.pinned]
            w = sum(costs[i] for i in free)
        else:
            free, w = (([0], sum(costs)) if s.items else ([], 0))
        if free and w > weight:
            best, weight = (s, free[0]), w
    if best is None:
        return False
    section, i = best
    del section.items[i]
    del cost[id(section)][i]
    section.omitted += 1
    return True
