"""How long two sequences agree from their start, at C speed.

A client that resends its whole history makes several per-request comparisons of a list
with its previous version (messages, chain hashes, forwarded pieces). A Python loop costs
~0.1-0.2 µs per element; comparing slices runs in C (identity first, then `==`, the way
list equality compares), so the common case, a list that only grew, costs one compare
(issue 26).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def leading_run(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading elements of `a` and `b` are the same object or equal."""
    if type(a) is not type(b) or not isinstance(a, list | tuple):
        a, b = tuple(a), tuple(b)
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # the first `lo` agree; the first `hi` do not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo
