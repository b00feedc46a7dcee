"""The arguments of recall (SPEC L1, L2), checked alike by every store that can search.

The SQL store (`recall.Recall`) and the in-memory one (`memory.MemoryStore`, replay)
refuse the same bad limits and queries with the same `InvalidOperationError`, so a caller
(the recall tools, automatic recall) sees one contract whichever store runs underneath.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import InvalidOperationError

if TYPE_CHECKING:
    from contextfold.core.recall.recall_text import SearchQuery

MAX_RESULTS = 100
MAX_EXPAND_NODES = 200


def search_query(query: str | SearchQuery, limit: int) -> SearchQuery:
    """`query` parsed (`recall_text.parse_query`), once `limit` is known to be in range."""
    if not 1 <= limit <= MAX_RESULTS:
        raise InvalidOperationError(f"limit must be between 1 and {MAX_RESULTS}, "
                                    f"got {limit}")
    # Imported here: the search-text machinery loads when a search runs.
    from contextfold.core.recall.recall_text import SearchQuery, parse_query

    try:
        return query if isinstance(query, SearchQuery) else parse_query(query)
    except ValueError as exc:
        raise InvalidOperationError(str(exc)) from exc


def check_expand(before: int, after: int, max_nodes: int) -> None:
    """Refuse negative counts and a `max_nodes` out of range."""
    if before < 0 or after < 0:
        raise InvalidOperationError("before and after count messages: they cannot be "
                                    "negative")
    if not 1 <= max_nodes <= MAX_EXPAND_NODES:
        raise InvalidOperationError(f"max_nodes must be between 1 and {MAX_EXPAND_NODES}")


def expand_range(at: int, before: int, after: int, other: int | None,
                 max_nodes: int) -> tuple[int, int]:
    """The branch positions first..last an expansion reads: `before`/`after` around `at`,
    or `at` to `other` (either order), at most `max_nodes` from the first."""
    first, last = at - before, at + after
    if other is not None:
        first, last = min(at, other), max(at, other)
    first = max(0, first)
    return first, min(last, first + max_nodes - 1)
