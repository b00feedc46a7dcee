"""The identifier ledger: identifiers carried forward verbatim across compactions.

A summary paraphrases; an identifier must not be paraphrased. So next to the summary every
checkpoint carries a ledger (`Checkpoint.ledger`) of the identifiers a resumed agent may
need to act on, found by `core.identifiers`. The merge keeps old entries first and, when
the ledger outgrows its budget, evicts the least critical kinds first into
`Ledger.evicted`, never silently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .estimator import estimate_text
from .identifiers import dedupe_identifiers, error_line, extract_identifiers, looks_like_path
from .messages import Ledger, LedgerEntry
from .projection import render_ledger
from .text_estimate import Count

# The extraction API lived here first; callers import it from either module.
__all__ = [
    "EVICTION_ORDER",
    "Count",
    "error_line",
    "extract_identifiers",
    "looks_like_path",
    "merge_ledger",
]


# Eviction order: the first kinds go first. A DOI or a Zotero item key is what a research
# agent cannot rediscover cheaply; a URL, a path or an old error can be found again.
EVICTION_ORDER: tuple[str, ...] = (
    "tool_error",
    "url",
    "path",
    "commit",
    "zotero_tag",
    "zotero_key",
    "zotero_collection",
    "zotero_annotation",
    "zotero_attachment",
    "zotero_item",
    "doi",
)
_UNKNOWN_KIND_RANK = 0.5  # an unknown kind is evicted right after tool errors


def _rank(kind: str) -> float:
    return float(EVICTION_ORDER.index(kind)) if kind in EVICTION_ORDER else _UNKNOWN_KIND_RANK


def merge_ledger(
    previous: Ledger,
    new: Sequence[LedgerEntry],
    max_tokens: int,
    count: Count = estimate_text,
) -> Ledger:
    """Carry `previous` forward and append `new`; evict into `evicted` only to fit.

    The rendered ledger (`core.projection.render_ledger`) fits `max_tokens`. Eviction takes
    the oldest entry of the least critical kind present (tool errors, then URLs, paths,
    commits, ..., DOIs last), so repeated compactions never lose an identifier that still
    fits, and an evicted identifier seen again comes back.
    """
    entries = dedupe_identifiers([*previous.entries, *new])
    live = {e.value for e in entries}
    evicted = [e for e in dedupe_identifiers(previous.evicted) if e.value not in live]
    ledger = Ledger(entries=tuple(entries), evicted=tuple(evicted))
    if count(render_ledger(ledger)) <= max_tokens:
        return ledger
    # Notes (titles) go before identifiers: first drop notes, least critical kinds first;
    # only if the bare identifiers still do not fit, evict identifiers themselves.
    order = sorted(range(len(entries)), key=lambda i: (_rank(entries[i].kind), i))
    bare = [e.model_copy(update={"note": ""}) for e in entries]
    if count(render_ledger(Ledger(entries=tuple(bare), evicted=tuple(evicted)))) <= max_tokens:
        def stripped(k: int) -> Ledger:
            gone = set(order[:k])
            return Ledger(entries=tuple(bare[i] if i in gone else e
                                        for i, e in enumerate(entries)),
                          evicted=tuple(evicted))
        return stripped(_fewest(len(order), lambda k: count(render_ledger(stripped(k)))
                                <= max_tokens))
    k = _fewest(len(order), lambda k: count(render_ledger(
        _assemble(bare, evicted, order[:k]))) <= max_tokens)
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


def _assemble(entries: list[LedgerEntry], evicted: list[LedgerEntry], victims: list[int]) -> Ledger:
    gone = set(victims)
    kept = tuple(e for i, e in enumerate(entries) if i not in gone)
    return Ledger(entries=kept, evicted=(*evicted, *(entries[i] for i in victims)))
