"""Choosing the keep boundary: where raw retention resumes after a compaction (SPEC K1-K6).

The input is the raw region of the branch (what is projected verbatim now, oldest first).
The boundary is the first node of a complete user turn (K1); whole turns are kept walking
back from the leaf while they fit (K2); a turn that alone exceeds the budget is not kept,
and neither is anything before it (K3); because the region starts at the previous
boundary, the new one can never be earlier (K4); what lies before it is newly old (K5).

K6 (split turn): when not even the latest turn fits, the boundary may instead fall at a
*tool-round start* inside it: an assistant message that does not continue another
assistant message, with every earlier tool call answered and no approval open across it.
The tail keeps as many recent rounds as fit, and always the round holding the latest tool
call and its result; when that round alone is too big, its tool results are clipped
head+tail in the projection (`Boundary.clips`), never in the durable history.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..values.messages import Message, Node
from ..view.projection import clip_tool_results

# A clipped tool result keeps at least this many characters (head + tail): less would not
# say what the output was. A round that does not fit even so is not kept (K3).
MIN_CLIP_CHARS = 400


@dataclass(frozen=True)
class Boundary:
    first_kept_id: str | None  # None: nothing is kept raw (K3)
    newly_old: tuple[Node, ...]
    kept: tuple[Node, ...]
    newly_old_tokens: int
    kept_tokens: int  # as projected: clipped results count clipped
    split: bool = False  # K6: first_kept_id is a tool round inside the current turn
    clips: Mapping[str, int] = field(default_factory=dict)  # node id -> chars per result

    @property
    def moved(self) -> bool:
        return bool(self.newly_old)


def blocked_cuts(nodes: Sequence[Node]) -> list[bool]:
    """`blocked[i]`: keeping from `nodes[i]` would cut a tool workflow in two (K1, K6).

    A workflow is a tool call with its approvals and results; a cut after its first node
    and at or before its last one separates them. An approval still pending leaves the
    workflow open to the end of the region.
    """
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    pending: set[str] = set()
    for i, node in enumerate(nodes):
        msg = node.message
        if msg is None:
            continue
        for call_id in (*(c.id for c in msg.tool_calls), *(r.call_id for r in msg.tool_results)):
            first.setdefault(call_id, i)
            last[call_id] = i
        for approval in msg.approvals:
            first.setdefault(approval.call_id, i)
            last[approval.call_id] = i
            if approval.state == "pending":
                pending.add(approval.call_id)
            else:
                pending.discard(approval.call_id)
    depth = [0] * (len(nodes) + 1)
    for call_id, lo in first.items():
        hi = len(nodes) - 1 if call_id in pending else last[call_id]
        if hi > lo:
            depth[lo + 1] += 1
            depth[hi + 1] -= 1
    blocked: list[bool] = []
    open_now = 0
    for i in range(len(nodes)):
        open_now += depth[i]
        blocked.append(open_now > 0)
    return blocked


def _starts_turn(msg: Message | None) -> bool:
    """A user message that says something: an approval alone is part of a tool workflow."""
    if msg is None or msg.role != "user":
        return False
    return not (msg.parts and len(msg.approvals) == len(msg.parts))


def turn_starts(nodes: Sequence[Node], blocked: Sequence[bool] | None = None) -> list[int]:
    """Indexes of user turn starts: the only places a K1 boundary may be."""
    blocked = blocked_cuts(nodes) if blocked is None else blocked
    return [i for i, n in enumerate(nodes) if _starts_turn(n.message) and not blocked[i]]


def round_starts(nodes: Sequence[Node], blocked: Sequence[bool], since: int = 0) -> list[int]:
    """Indexes (from `since`) of tool-round starts: where a K6 boundary may be."""
    out: list[int] = []
    for i in range(since, len(nodes)):
        msg = nodes[i].message
        if msg is None or msg.role != "assistant" or blocked[i]:
            continue
        prev = nodes[i - 1].message if i > 0 else None
        if prev is not None and prev.role == "assistant":
            continue  # the rest of one reply (Claude Code writes a node per block)
        out.append(i)
    return out


def boundary_at(nodes: Sequence[Node], index: int | None, costs: Sequence[int], *,
                split: bool = False, clips: Mapping[str, int] | None = None,
                kept_tokens: int | None = None) -> Boundary:
    """Split `nodes` at `index` (None or len(nodes): keep nothing)."""
    cut = len(nodes) if index is None else index
    kept = tuple(nodes[cut:])
    return Boundary(
        first_kept_id=kept[0].id if kept else None,
        newly_old=tuple(nodes[:cut]),
        kept=kept,
        newly_old_tokens=sum(costs[:cut]),
        kept_tokens=sum(costs[cut:]) if kept_tokens is None else kept_tokens,
        split=split and bool(kept),
        clips=dict(clips or {}),
    )


def choose_boundary(
    nodes: Sequence[Node],
    tail_budget: int,
    cost: Callable[[Node], int],
    *,
    split_turn: bool = False,
    measure: Callable[[Message], int] | None = None,
) -> Boundary:
    """Keep the longest run of whole turns, ending at the leaf, that fits `tail_budget`.

    With `split_turn` (K6), when not even the latest turn fits, keep its latest rounds
    instead; `measure` sizes a clipped copy of a message (needed to clip a round that
    alone is too big; without it such a round is not kept).
    """
    costs = [cost(n) for n in nodes]
    blocked = blocked_cuts(nodes)
    starts = turn_starts(nodes, blocked)
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
    if kept_from is not None or not split_turn:
        return boundary_at(nodes, kept_from, costs)
    return split_turn_boundary(nodes, costs, blocked, starts[-1] if starts else None,
                               tail_budget, measure)


def split_turn_boundary(
    nodes: Sequence[Node],
    costs: Sequence[int],
    blocked: Sequence[bool],
    turn_start: int | None,
    tail_budget: int,
    measure: Callable[[Message], int] | None,
) -> Boundary:
    """K6: the earliest tool round of the current turn from which the rest fits.

    `turn_start` is the index of the user message that started the current turn (None:
    it started before `nodes`, at an earlier split). The round holding the latest tool
    call is always kept, clipped if it alone is too big; if it cannot fit even clipped,
    nothing is kept (K3).
    """
    since = 0 if turn_start is None else turn_start + 1
    rounds = round_starts(nodes, blocked, since)
    if not rounds:
        return boundary_at(nodes, None, costs)
    last_call = next((i for i in range(len(nodes) - 1, since - 1, -1)
                      if nodes[i].message is not None and nodes[i].message.tool_calls), None)
    latest = rounds[-1]
    if last_call is not None:
        latest = next((r for r in reversed(rounds) if r <= last_call), rounds[0])
    suffix = 0
    fits: int | None = None
    for i in range(len(nodes) - 1, -1, -1):
        suffix += costs[i]
        if suffix > tail_budget:
            break
        fits = i  # everything from i on fits
    if fits is not None:
        chosen = next((r for r in rounds if r >= fits), None)
        if chosen is not None and chosen <= latest:
            return boundary_at(nodes, chosen, costs, split=True)
    clipped = clip_round(nodes, latest, costs, tail_budget, measure)
    if clipped is None:
        return boundary_at(nodes, None, costs)
    clips, tokens = clipped
    return boundary_at(nodes, latest, costs, split=True, clips=clips, kept_tokens=tokens)


def clip_round(
    nodes: Sequence[Node],
    start: int,
    costs: Sequence[int],
    tail_budget: int,
    measure: Callable[[Message], int] | None,
) -> tuple[dict[str, int], int] | None:
    """The largest per-result clip that makes `nodes[start:]` fit, and its size in tokens.

    None when there is nothing to clip or even `MIN_CLIP_CHARS` per result is too much
    (e.g. the call's own arguments are larger than the budget).
    """
    if measure is None:
        return None
    tools = [i for i in range(start, len(nodes))
             if nodes[i].message is not None and nodes[i].message.tool_results]
    longest = max((len(r.output) for i in tools for r in nodes[i].message.tool_results),
                  default=0)
    if longest <= MIN_CLIP_CHARS:
        return None
    fixed = sum(costs[i] for i in range(start, len(nodes)) if i not in tools)

    def total(limit: int) -> int:
        return fixed + sum(measure(clip_tool_results(nodes[i].message, limit)) for i in tools)

    lo, hi = MIN_CLIP_CHARS, longest
    lo_tokens = total(lo)
    if lo_tokens > tail_budget:
        return None
    # Binary search to within ~2% of the best clip: each probe re-measures the round.
    while hi - lo > max(32, lo // 50):
        mid = (lo + hi) // 2
        tokens = total(mid)
        if tokens <= tail_budget:
            lo, lo_tokens = mid, tokens
        else:
            hi = mid
    clips = {nodes[i].id: lo for i in tools
             if any(len(r.output) > lo for r in nodes[i].message.tool_results)}
    return clips, lo_tokens


def latest_turn_boundary(nodes: Sequence[Node], cost: Callable[[Node], int]) -> Boundary:
    """The smallest compaction that still compacts something: keep only the latest turn (M2)."""
    costs = [cost(n) for n in nodes]
    starts = turn_starts(nodes)
    # No user turn starts here (the region continues a turn split earlier, K6): folding all
    # of it would keep less than the tail budget allows, so the boundary stays (M4).
    return boundary_at(nodes, starts[-1] if starts else 0, costs)
