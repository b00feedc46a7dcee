"""The one sizing policy: does the next request fit, what may a compaction spend, and when
is a request refused (SPEC P1-P3, P5, A1).

Every face asks these questions through the runtime's driver (`runtime.fitting`); none
keeps its own copy. All of it is arithmetic over token counts the estimator measured:

* `decide(tokens, limit, floor, smallest_checkpoint)` -> `Fits`, `Compact` or `Blocked`.
  A request is refused without compacting only when even the best case cannot fit: what
  no compaction can shrink (system prompt, tools, pins, the drafts) plus the smallest
  checkpoint a summariser can write (P5).
* `fit_budget(budget, fixed, smallest_checkpoint)`: the budget a preflight compaction plans
  with. The history may take what the fixed part leaves; the raw tail gives way first (down
  to nothing kept raw), then the summary shrinks to the room that is left (P2, P5).
* `tighter_budget(budget, overshoot, smallest_checkpoint)`: when a written checkpoint still
  measures over the limit (estimates of a text and of the request it sits in differ a
  little), the next, smaller summary budget; None when no smaller one can be written.
* `budget_after_overhead(budget, overhead)`: the budget of the messages alone when every
  request also carries a fixed overhead (an agent's system prompt and tools, as replay
  measures it); `OverheadTooLargeError` when not even a checkpoint fits beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import ContextfoldError
from ..models.budget import Budget
from ..values.messages import Ledger, LedgerEntry
from ..view.projection import checkpoint_frame
from .estimator import MESSAGE_OVERHEAD, estimate_text

# The summary budget a correction takes off beyond the measured overshoot: rounding of
# the estimator over a re-fitted text, so one correction is enough in practice.
CORRECTION_SLACK = 16


@dataclass(frozen=True)
class Fits:
    """The request fits the safe input limit as it stands."""

    tokens: int


@dataclass(frozen=True)
class Compact:
    """Over the limit, and a compaction can make it fit: compact, then check again."""

    tokens: int
    best_case: int
    safe_input_limit: int


@dataclass(frozen=True)
class Blocked:
    """No compaction can make the request fit: refuse it (SPEC P3), nothing is sent.

    `best_case` is the smallest request that was tried or that any compaction could reach;
    shortening the request by `overflow_tokens` makes that best case fit.
    """

    tokens: int
    best_case: int
    safe_input_limit: int

    @property
    def overflow_tokens(self) -> int:
        return max(1, self.best_case - self.safe_input_limit)


Decision = Fits | Compact | Blocked


def best_case(tokens: int, floor: int, smallest_checkpoint: int) -> int:
    """The smallest request any compaction can build: the part nothing shrinks (`floor`:
    system prompt, tools, pins, drafts) plus the history folded into the smallest
    checkpoint a summariser can write, or the history as it is when that is smaller."""
    history = max(0, tokens - floor)
    return floor + min(history, smallest_checkpoint)


def decide(tokens: int, limit: int, floor: int, smallest_checkpoint: int) -> Decision:
    """What to do with a request of `tokens` against the safe input `limit` (P1-P3, P5)."""
    if tokens <= limit:
        return Fits(tokens)
    best = best_case(tokens, floor, smallest_checkpoint)
    if best > limit:
        return Blocked(tokens, best, limit)
    return Compact(tokens, best, limit)


def after_compaction(tokens: int, limit: int, tried: int) -> Decision:
    """The decision once compaction has done what it could: `tried` is the smallest
    request it reached (the request as it stands, when nothing could be committed)."""
    if tokens <= limit:
        return Fits(tokens)
    return Blocked(tokens, min(tokens, tried), limit)


def leaves_room(budget: Budget, fixed: int) -> bool:
    """Whether a history has room beside `fixed` tokens every request carries (an agent's
    system prompt and tools): more than a whole checkpoint summary must remain of the safe
    limit, or no compaction could bring a request under it (P5)."""
    return budget.safe_input_limit - fixed > budget.summary_budget


class OverheadTooLargeError(ContextfoldError, ValueError):
    """The fixed overhead every replayed request carries leaves the session no room in this
    window. `smallest` is the smallest window (same model) that works beside it, None when
    none is known; `explain(...)` words it with the face's option names."""

    kind = "bad_input"

    def __init__(self, overhead: int, safe_input_limit: int, smallest: int | None = None
                 ) -> None:
        self.overhead = overhead
        self.safe_input_limit = safe_input_limit
        self.smallest = smallest
        super().__init__(self.explain())

    def explain(self, window: str = "--context-window", overhead: str = "--overhead") -> str:
        text = (f"a fixed overhead of {self.overhead:,} tokens (the agent's system prompt and "
                f"tools) leaves no room for the session in a safe input limit of "
                f"{self.safe_input_limit:,}")
        if self.smallest is not None:
            text += f"; the smallest window that works is {self.smallest:,} tokens"
        return f"{text}: give a larger {window} or a smaller {overhead}"

    def facts(self) -> dict[str, Any]:
        return {"smallest_window": self.smallest, "overhead_tokens": self.overhead}

    def public_message(self) -> str:
        return self.explain("context window", "overhead")


def budget_after_overhead(budget: Budget, overhead: int) -> Budget:
    """`budget` for the messages alone when every request also carries `overhead` tokens
    (`OverheadTooLargeError` when not even a checkpoint summary would fit beside it)."""
    if overhead <= 0:
        return budget
    safe = budget.safe_input_limit - overhead
    if not leaves_room(budget, overhead):
        raise OverheadTooLargeError(overhead, budget.safe_input_limit)
    return budget.model_copy(update={
        "safe_input_limit": safe,
        "auto_threshold": int(budget.auto_threshold * safe / budget.safe_input_limit),
        # After a compaction the request is summary + tail: half of what the summary leaves
        # goes to the raw tail, half stays free so the next turns fit before compacting again
        # (a tail of 0 would leave a long tool loop nothing raw: K6).
        "tail_budget": max(0, min(budget.tail_budget, (safe - budget.summary_budget) // 2)),
    })


def over_auto_threshold(tokens: int, budget: Budget) -> bool:
    """SPEC A1: after a completed turn, compact in the background above this."""
    return tokens > budget.auto_threshold


def recall_room(tokens: int, limit: int, recall_budget: int) -> int:
    """SPEC L5: the tokens the automatic recall block may take in a request that measures
    `tokens` without it: its budget, never more than the safe `limit` leaves. The block is
    chosen after the request was made to fit, so it can never push it over the limit nor
    cause a compaction; a request near the limit gets a smaller block, or none."""
    return max(0, min(recall_budget, limit - tokens))


def recall_full(used: int, recall_budget: int, smallest: int) -> bool:
    """SPEC Q5: the recall blocks of the turns since the checkpoint (`used` tokens) leave
    no room in the recall budget for the smallest block (`core.recall.auto_recall.smallest_block`):
    the next turn gets none until a checkpoint folds them in."""
    return recall_budget > 0 and recall_budget - used < smallest


def recall_compaction_due(full: bool, tokens: int, budget: Budget, fixed: int,
                          checkpoint: int) -> bool:
    """SPEC Q5: full recall blocks are a reason to compact at the check after a turn, when
    the compaction has something to fold: the history after the checkpoint (`tokens` of
    the request less its `fixed` part and the `checkpoint`) is more than the raw tail
    keeps. Otherwise the blocks wait for the compaction a size trigger makes."""
    return full and tokens - fixed - checkpoint > budget.tail_budget


def fit_budget(budget: Budget, fixed: int, smallest_summary: int) -> Budget:
    """The budget a preflight compaction plans with when `fixed` tokens (system prompt,
    tools, pins, drafts) sit beside the history in every request (SPEC P2, P5).

    The checkpoint and the raw tail together get what the fixed part leaves of the safe
    limit: the tail gives way first (to nothing kept raw), then the summary budget shrinks
    to that room, never below `smallest_summary` (a shorter summary cannot be written;
    `decide` refuses such requests before any compaction). The ledger's cap shrinks with
    the summary budget.
    """
    room = budget.safe_input_limit - fixed - frame_reserve()
    summary = max(1, min(budget.summary_budget, max(smallest_summary, room)))
    tail = max(0, min(budget.tail_budget, room - summary))
    if summary == budget.summary_budget and tail == budget.tail_budget:
        return budget
    return with_summary_budget(budget, summary).model_copy(update={"tail_budget": tail})


def tighter_budget(budget: Budget, overshoot: int, smallest_summary: int) -> Budget | None:
    """A summary budget `overshoot` (plus a little slack) smaller, for a checkpoint that
    measured over the limit; None when it cannot shrink below `smallest_summary`."""
    if overshoot <= 0 or budget.summary_budget <= smallest_summary:
        return None
    summary = max(smallest_summary, budget.summary_budget - overshoot - CORRECTION_SLACK)
    return with_summary_budget(budget, summary)


def with_summary_budget(budget: Budget, summary: int) -> Budget:
    """`budget` with another summary budget; the ledger keeps its share of it."""
    share = budget.ledger_budget / budget.summary_budget if budget.summary_budget else 0.0
    ledger = max(1, min(budget.ledger_budget, int(summary * share)))
    return budget.model_copy(update={"summary_budget": summary, "ledger_budget": ledger})


# The most a recall note ever lists of what the ledger evicted (core.projection bounds the
# list by characters): DOI-like text, which costs the estimator the most per character.
_WORST_EVICTED = Ledger(evicted=tuple(
    LedgerEntry(kind="doi", value=f"10.{1000 + i}/x{i:04d}.{i}") for i in range(40)))


def frame_reserve(count: Callable[[str], int] = estimate_text) -> int:
    """Tokens a checkpoint message takes beyond its summary budget (which holds the
    summary text, the ledger and a split turn's context), at most: the message itself, the
    header, the recall note naming as many evicted identifiers as it ever lists (SPEC L3)
    and the masking note. Sizing counts it beside every checkpoint."""
    frame = checkpoint_frame(_WORST_EVICTED, masked_before_id="(masked)")
    return MESSAGE_OVERHEAD + count(frame) + 1


def smallest_checkpoint(smallest_summary: int,
                        count: Callable[[str], int] = estimate_text) -> int:
    """Tokens of the smallest checkpoint message a summariser can be held to (SPEC P5):
    `smallest_summary` (the shortest summary text it may have to write), no ledger entry,
    and the largest frame. A request that does not fit beside it cannot be made to fit by
    compacting."""
    return frame_reserve(count) + smallest_summary
