"""The identifier ledger: identifiers carried forward verbatim across compactions.

A summary paraphrases; an identifier must not be paraphrased. So next to the summary every
checkpoint carries a ledger (`Checkpoint.ledger`) of the identifiers a resumed agent may
need to act on, found by `core.text.identifiers`. The merge keeps old entries first and, when
the ledger outgrows its budget, evicts into `Ledger.evicted`, never silently: first what
was only seen in tool traffic, then what the user wrote, and what the user named in a
constraint ("never overwrite X") last; within each, the least critical kinds first.

The budget is adaptive (issue 11): the ledger takes what it needs, up to a cap that scales
with the model (`Budget.ledger_budget`, by default 60% of the summary budget); the summary
text gets the rest (`ledger_tokens`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..sizing.estimator import estimate_text
from ..text.identifiers import (
    USER_CONSTRAINT,
    dedupe_identifiers,
    error_line,
    extract_identifiers,
    looks_like_path,
)
from ..text.text_estimate import Count
from ..values.messages import Ledger, LedgerEntry
from ..view.projection import render_ledger
from .plan import Plan

# The extraction API lived here first; callers import it from either module.
__all__ = [
    "EVICTION_ORDER",
    "Count",
    "error_line",
    "evicted_since",
    "extract_identifiers",
    "ledger_tokens",
    "looks_like_path",
    "merge_ledger",
    "plan_ledger",
]


# Eviction order: the first kinds go first. A DOI or a Zotero item key is what a research
# agent cannot rediscover cheaply; a URL, a path or an old error can be found again.
EVICTION_ORDER: tuple[str, ...] = (
    "tool_error",
    "error_code",
    "url",
    "path",
    "commit",
    "issue",
    "zotero_tag",
    "zotero_key",
    "zotero_collection",
    "zotero_annotation",
    "zotero_attachment",
    "zotero_item",
    "isbn",
    "pmid",
    "arxiv",
    "doi",
)
_UNKNOWN_KIND_RANK = 0.5  # an unknown kind is evicted right after tool errors


def _rank(kind: str) -> float:
    return float(EVICTION_ORDER.index(kind)) if kind in EVICTION_ORDER else _UNKNOWN_KIND_RANK


def ledger_tokens(ledger: Ledger, count: Count = estimate_text) -> int:
    """Tokens the rendered ledger takes in the checkpoint (0 when it is empty)."""
    text = render_ledger(ledger)
    return count(text) if text else 0


def plan_ledger(plan: Plan) -> Ledger:
    """The ledger a checkpoint of `plan` carries: the plan's, or merged now for a plan
    built by hand (previous ledger + identifiers of the newly old nodes, within the cap)."""
    if plan.ledger is not None:
        return plan.ledger
    return merge_ledger(plan.previous_ledger, plan.identifiers(), plan.budget.ledger_budget)


def evicted_since(previous: Ledger, current: Ledger) -> list[LedgerEntry]:
    """The entries `current` evicted that `previous` had not: one compaction's evictions."""
    before = {e.value for e in previous.evicted}
    return [e for e in current.evicted if e.value not in before]


def merge_ledger(
    previous: Ledger,
    new: Sequence[LedgerEntry],
    max_tokens: int,
    count: Count = estimate_text,
) -> Ledger:
    """Carry `previous` forward and append `new`; evict into `evicted` only to fit.

    The rendered ledger (`core.view.projection.render_ledger`) fits `max_tokens`. Eviction takes
    the oldest entry of the lowest priority (tool traffic, then what the user wrote, user
    constraints last) and, within it, of the least critical kind present (tool errors,
    then URLs, paths, commits, ..., DOIs last), so repeated compactions never lose an
    identifier that still fits, and an evicted identifier seen again comes back.
    """
    entries = dedupe_identifiers([*previous.entries, *new])
    live = {e.value for e in entries}
    evicted = [e for e in dedupe_identifiers(previous.evicted) if e.value not in live]
    ledger = Ledger(entries=tuple(entries), evicted=tuple(evicted))
    if count(render_ledger(ledger)) <= max_tokens:
        return ledger
    # Notes (titles) go before identifiers: first drop notes, least critical kinds first;
    # only if the bare identifiers still do not fit, evict identifiers themselves. The
    # words of the user's rules are kept longest: before them go every ordinary note and,
    # if need be, every ordinary identifier; after them, only the rules' identifiers.
    order = sorted(range(len(entries)),
                   key=lambda i: (entries[i].priority, _rank(entries[i].kind), i))
    ordinary = [i for i in order if entries[i].priority < USER_CONSTRAINT]
    # An entry without a note is its own bare form (most are: a copy each cost more than
    # the rest of the merge on a long history).
    bare = [e.model_copy(update={"note": ""}) if e.note else e for e in entries]
    ruled = [e if e.priority >= USER_CONSTRAINT else b for e, b in zip(entries, bare,
                                                                     strict=True)]

    def fits(ledger: Ledger) -> bool:
        return count(render_ledger(ledger)) <= max_tokens

    def stripped(plain: list[LedgerEntry], strip: list[int], k: int,
                 trial: bool = False) -> Ledger:
        gone = set(strip[:k])
        return _ledger([plain[i] if i in gone else e for i, e in enumerate(entries)],
                       evicted, trial)

    for plain, strip in ((ruled, ordinary), (bare, order)):
        if strip and fits(stripped(plain, strip, len(strip), True)):
            k = _fewest(len(strip),
                        lambda k: fits(stripped(plain, strip, k, True)))  # noqa: B023
            return stripped(plain, strip, k)
        if plain is ruled and fits(_assemble(ruled, evicted, ordinary, True)):
            k = _fewest(len(order), lambda k: fits(_assemble(ruled, evicted, order[:k], True)))
            return _assemble(ruled, evicted, order[:k])
    k = _fewest(len(order), lambda k: fits(_assemble(bare, evicted, order[:k], True)))
    return _assemble(bare, evicted, order[:k])


def _fewest(n: int, fits: Callable[[int], bool]) -> int:
    """The smallest k in 1..n with fits(k), by bisection (fits(n) is assumed true).

    Dropping follows a fixed order and dropping more never lengthens the rendering, so
    O(log n) renderings find it.
    """
    low, high = 1, n
    while low < high:
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid + 1
    return low


def _ledger(entries: Sequence[LedgerEntry], evicted: Sequence[LedgerEntry],
            trial: bool = False) -> Ledger:
    """A ledger of `entries` (valid already); a `trial` one, only rendered to be measured,
    unvalidated: validating walks every entry again, once per bisection step (issue 26)."""
    if trial:
        return Ledger.model_construct(entries=tuple(entries), evicted=tuple(evicted))
    return Ledger(entries=tuple(entries), evicted=tuple(evicted))


def _assemble(entries: list[LedgerEntry], evicted: list[LedgerEntry], victims: list[int],
              trial: bool = False) -> Ledger:
    gone = set(victims)
    kept = [e for i, e in enumerate(entries) if i not in gone]
    return _ledger(kept, [*evicted, *(entries[i] for i in victims)], trial)
