"""Prefix breaks (SPEC Q5): does each request start with the one before it?

A provider's prompt cache serves a request from the longest prefix it has seen; a request
whose content does not start with the previous request's content re-bills everything from
the first difference on. Between two checkpoints the projection only grows at its end
(SPEC Q5), so the only breaks it should show are at checkpoints: a compaction rewrites the
request on purpose. This module counts them over a sequence of requests, each given as its
prompt blocks in order (`core.money.prices.Block`, as `core.money.costs.projection_blocks` makes
them: equal keys, equal bytes), and attributes each break to a checkpoint (the request's
checkpoint block differs from the previous request's) or not. Pure: replay, the benches and
the tests feed it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .prices import Block

CHECKPOINT_KEY = "checkpoint:"  # `core.money.costs.projection_blocks`' key of a checkpoint block


@dataclass(frozen=True)
class PrefixBreaks:
    """The breaks of one sequence of requests: how many requests, how many did not start
    with the previous one's content, how many of those a checkpoint explains, and the
    indices of the others (SPEC Q5 says there are none)."""

    requests: int
    breaks: int
    at_checkpoint: int
    unexplained: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "breaks": self.breaks,
                "at_checkpoint": self.at_checkpoint,
                "unexplained": len(self.unexplained),
                "unexplained_requests": list(self.unexplained[:20])}


def _checkpoint(keys: Sequence[str]) -> str | None:
    return next((k for k in keys if k.startswith(CHECKPOINT_KEY)), None)


def starts_with(keys: Sequence[str], prefix: Sequence[str]) -> bool:
    """Does the request of `keys` start with the whole content of `prefix`'s request?"""
    return len(prefix) <= len(keys) and all(a == b for a, b in zip(prefix, keys, strict=False))


def count_prefix_breaks(requests: Iterable[Sequence[Block] | Sequence[str]]) -> PrefixBreaks:
    """The prefix breaks of `requests` (oldest first; each its blocks, or their keys)."""
    previous: list[str] | None = None
    total = breaks = at_checkpoint = 0
    unexplained: list[int] = []
    for i, request in enumerate(requests):
        keys = [b.key if isinstance(b, Block) else b for b in request]
        total += 1
        if previous is not None and not starts_with(keys, previous):
            breaks += 1
            if _checkpoint(keys) != _checkpoint(previous):
                at_checkpoint += 1
            else:
                unexplained.append(i)
        previous = keys
    return PrefixBreaks(total, breaks, at_checkpoint, tuple(unexplained))
