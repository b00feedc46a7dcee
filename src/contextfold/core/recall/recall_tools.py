"""The recall tools' definitions (SPEC L2) as the request carries them: pure data.

`runtime.recall` makes its `ToolSpec`s from these, and the faces that size a stored session's
next request without opening a conversation (`contextfold project`, `contextfold context`)
count the same definitions, so every face counts the tools of one request alike (issue 41).
Kept here, apart from `runtime.recall`, so a read-only command loads no runtime or store.
"""

from __future__ import annotations

from typing import Any

HISTORY_SEARCH = "history_search"
HISTORY_EXPAND = "history_expand"

# Kept short: the definitions travel with every request. The shape is `runtime.sizing
# .tool_dicts`' (name, description, input_schema), which the estimator counts.
SEARCH_DEFINITION: dict[str, Any] = {
    "name": HISTORY_SEARCH,
    "description": (
        "Search this conversation's whole history, compacted parts included. All terms must "
        "match; identifiers match verbatim; \"a phrase\", prefix*. Returns node ids and "
        "snippets."),
    "input_schema": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
    },
}

EXPAND_DEFINITION: dict[str, Any] = {
    "name": HISTORY_EXPAND,
    "description": (
        "Read original messages of this conversation: node_id, with before/after neighbours "
        "or up to to_node_id. Bounded; says when cut."),
    "input_schema": {
        "type": "object",
        "properties": {"node_id": {"type": "string"}, "before": {"type": "integer"},
                       "after": {"type": "integer"}, "to_node_id": {"type": "string"},
                       "max_tokens": {"type": "integer"}},
        "required": ["node_id"],
    },
}

RECALL_DEFINITIONS: tuple[dict[str, Any], ...] = (SEARCH_DEFINITION, EXPAND_DEFINITION)


def recall_tool_json() -> list[dict[str, Any]]:
    """A fresh copy of the definitions, as the request's tool list."""
    import copy

    return copy.deepcopy(list(RECALL_DEFINITIONS))


__all__ = ["EXPAND_DEFINITION", "HISTORY_EXPAND", "HISTORY_SEARCH", "RECALL_DEFINITIONS",
           "SEARCH_DEFINITION", "recall_tool_json"]
