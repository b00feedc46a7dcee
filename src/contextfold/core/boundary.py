"""Choosing the keep boundary: where raw retention resumes after a compaction (SPEC K1-K5).

The input is the raw region of the branch (what is projected verbatim now, oldest first).
The boundary is always the first node of a complete user turn (K1); whole turns are kept
walking back from the leaf while they fit (K2); a turn that alone exceeds the budget is not
kept, and neither is anything before it (K3); because the region starts at the previous
boundary, the new one can never be earlier (K4); what lies before it is newly old (K5).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .messages import Node


@dataclass(frozen=True)
class Boundary:
    first_kept_id: str | None  # None: nothing is kept raw (K3)
    newly_old: tuple[Node, ...]
    kept: tuple[Node, ...]
    newly_old_tokens: int
    kept_tokens: int

    @property
    def moved(self) -> bool:
        return bool(self.newly_old)


def turn_starts(nodes: Sequence[Node]) -> list[int]:
    """Indexes of user messages: the only places a boundary may be (K1)."""
    return [i for i, n in enumerate(nodes) if n.is_user_message]


def boundary_at(nodes: Sequence[Node], index: int | None, costs: Sequence[int]) -> Boundary:
    """Split `nodes` at `index` (None or len(nodes): keep nothing)."""
    cut = len(nodes) if index is None else index
    kept = tuple(nodes[cut:])
    return Boundary(
        first_kept_id=kept[0].id if kept else None,
        newly_old=tuple(nodes[:cut]),
        kept=kept,
        newly_old_tokens=sum(costs[:cut]),
        kept_tokens=sum(costs[cut:]),
    )


def choose_boundary(
    nodes: Sequence[Node], tail_budget: int, cost: Callable[[Node], int]
) -> Boundary:
    """Keep the longest run of whole turns, ending at the leaf, that fits `tail_budget`."""
    costs = [cost(n) for n in nodes]
    starts = turn_starts(nodes)
    kept_from: int | None = None
    end = len(nodes)
    used = 0
    for start in reversed(starts):
        turn_cost = sum(costs[start:end])
        if used + turn_cost > tail_budget:
            break  # K3: this turn does not fit; the boundary is the user turn after it
        used += turn_cost
        kept_from = start
        end = start
    return boundary_at(nodes, kept_from, costs)


def latest_turn_boundary(nodes: Sequence[Node], cost: Callable[[Node], int]) -> Boundary:
    """The smallest compaction that still compacts something: keep only the latest turn (M2)."""
    costs = [cost(n) for n in nodes]
    starts = turn_starts(nodes)
    return boundary_at(nodes, starts[-1] if starts else None, costs)
