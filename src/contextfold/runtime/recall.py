"""Recall tools (SPEC L2): what the runtime offers the model to get back into its history.

`history_search(query)` finds messages of the session's own branch (the store's full-text
index, SPEC L1, L4); `history_expand(node_id, ...)` returns the original messages of a node
or a range within a token budget, saying when it cut. The tool definitions are ordinary
`ToolSpec`s, so every provider adapter sends them in its own wire shape (OpenAI `functions`,
Anthropic `tools`). `Recall` runs the calls; `Conversation` answers them itself inside its
tool loop, and any other face (service, proxy) reuses the same object.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from ..core.recall.recall_text import RECALL_TOOL_NAMES, message_text
from ..core.recall.recall_tools import (
    EXPAND_DEFINITION,
    HISTORY_EXPAND,
    HISTORY_SEARCH,
    SEARCH_DEFINITION,
)
from ..core.sizing.estimator import estimate_text
from ..core.text.text_estimate import Count
from ..core.values.messages import ToolCallPart, ToolResultPart
from ..core.values.resources import clip_middle
from ..errors import ContextfoldError
from ..providers.base import ToolSpec
from ..store.errors import StoreError
from ..store.protocol import SessionStore
from ..store.values import RecallHit

DEFAULT_SEARCH_LIMIT = 8
MAX_SEARCH_LIMIT = 20
DEFAULT_EXPAND_TOKENS = 4_000
_MIN_CLIP_CHARS = 200

# The definitions are `core.recall.recall_tools`' (what the faces that size a stored request count).
SEARCH_TOOL = ToolSpec(**copy.deepcopy(SEARCH_DEFINITION))
EXPAND_TOOL = ToolSpec(**copy.deepcopy(EXPAND_DEFINITION))

RECALL_TOOLS: tuple[ToolSpec, ...] = (SEARCH_TOOL, EXPAND_TOOL)
assert {t.name for t in RECALL_TOOLS} == RECALL_TOOL_NAMES  # the index skips these names


def offered_tools(app_tools: tuple[ToolSpec, ...], recall: bool) -> tuple[ToolSpec, ...]:
    """Every tool a conversation offers its model: the application's, then recall's unless
    it opts out (SPEC L2). An application tool named like a recall tool is refused."""
    if not recall:
        return app_tools
    clash = sorted(RECALL_TOOL_NAMES & {t.name for t in app_tools})
    if clash:
        raise ValueError(f"tool name(s) {', '.join(clash)} are the runtime's recall "
                         "tools: rename yours or open the conversation with recall=False")
    return app_tools + RECALL_TOOLS


def hit_dict(hit: RecallHit, *, in_context: bool | None = None) -> dict[str, Any]:
    """One search match as JSON (the tool result and `contextfold recall --json`)."""
    msg = hit.node.message
    out: dict[str, Any] = {
        "node_id": hit.node.id, "position": hit.position, "turn": hit.turn,
        "role": msg.role if msg is not None else None,
        "created_at": hit.node.created_at.isoformat(timespec="seconds"),
        "snippet": hit.snippet,
    }
    if in_context is not None:
        out["in_context"] = in_context
    return out


class RecallInputError(ContextfoldError, ValueError):
    """A recall tool call with arguments that cannot be used (answered as a tool error)."""

    kind = "bad_input"


def _int(args: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise RecallInputError(f"{name} must be an integer")
    try:
        number = int(value)
    except ValueError as exc:
        raise RecallInputError(f"{name} must be an integer, got {value!r}") from exc
    return max(low, min(high, number))


def _str(args: dict[str, Any], name: str, *, required: bool) -> str | None:
    value = args.get(name)
    if value is None or value == "":
        if required:
            raise RecallInputError(f"{name} is required")
        return None
    if not isinstance(value, str):
        raise RecallInputError(f"{name} must be a string")
    return value.strip()


@dataclass
class Recall:
    """Recall over one session of a store (its `search_history` and `expand_history`).

    `expand_tokens` caps what one expansion returns (a call may ask for less, never more);
    `count` measures it (the estimator by default).
    """

    store: SessionStore
    session_id: str
    expand_tokens: int = DEFAULT_EXPAND_TOKENS
    count: Count = field(default=estimate_text)

    @staticmethod
    def handles(call: ToolCallPart) -> bool:
        return call.name in RECALL_TOOL_NAMES

    async def search(self, query: str, *, limit: int = DEFAULT_SEARCH_LIMIT,
                     in_context: Collection[str] = ()) -> dict[str, Any]:
        """Matches of `query` on the branch; if no message has every term, those with any."""
        hits = await self.store.search_history(self.session_id, query, limit=limit)
        match = "all terms"
        if not hits:
            hits = await self.store.search_history(self.session_id, query, limit=limit,
                                                   any_term=True)
            match = "any term (no message has them all)" if hits else "none"
        return {"query": query, "match": match,
                "matches": [hit_dict(h, in_context=h.node.id in in_context) for h in hits]}

    async def expand(self, node_id: str, *, before: int = 0, after: int = 0,
                     to_node_id: str | None = None,
                     max_tokens: int | None = None) -> dict[str, Any]:
        """The original messages, in order, within the token budget (SPEC L2)."""
        budget = min(self.expand_tokens, max_tokens or self.expand_tokens)
        hits = await self.store.expand_history(self.session_id, node_id, before=before,
                                               after=after, to_node_id=to_node_id)
        messages: list[dict[str, Any]] = []
        used, truncated = 0, False
        for hit in hits:
            assert hit.node.message is not None  # the store returns messages only
            body = message_text(hit.node.message)
            cost = self.count(body)
            if used + cost > budget:
                truncated = True
                room = budget - used
                if room * 4 < _MIN_CLIP_CHARS and messages:
                    break
                body = self._clip(body, max(room, 1))
                cost = self.count(body)
            messages.append({"node_id": hit.node.id, "position": hit.position,
                             "turn": hit.turn, "role": hit.node.message.role, "text": body})
            used += cost
            if truncated:
                break
        out: dict[str, Any] = {"messages": messages, "truncated": truncated,
                               "budget_tokens": budget}
        if truncated:
            last = messages[-1]["node_id"] if messages else node_id
            out["note"] = (f"cut at the budget of {budget} tokens: {len(messages)} of "
                           f"{len(hits)} messages shown, the last one clipped. Expand from "
                           f"{last} with a narrower range to read on.")
        return out

    def _clip(self, body: str, tokens: int) -> str:
        """`body` clipped (head + tail, with a marker) to about `tokens`."""
        chars = max(_MIN_CLIP_CHARS, tokens * 4)
        clipped = clip_middle(body, chars)
        while self.count(clipped) > tokens and chars > _MIN_CLIP_CHARS:
            chars = max(_MIN_CLIP_CHARS, chars * 3 // 4)
            clipped = clip_middle(body, chars)
        return clipped

    async def run(self, call: ToolCallPart, *, in_context: Collection[str] = ()) -> ToolResultPart:
        """Answer one recall tool call; bad arguments and unknown nodes are tool errors the
        model can read and correct, never exceptions that end the turn."""
        args = call.input if isinstance(call.input, dict) else {}
        try:
            if call.name == HISTORY_SEARCH:
                query = _str(args, "query", required=True)
                assert query is not None
                result = await self.search(
                    query, limit=_int(args, "limit", DEFAULT_SEARCH_LIMIT, 1, MAX_SEARCH_LIMIT),
                    in_context=in_context)
            elif call.name == HISTORY_EXPAND:
                node_id = _str(args, "node_id", required=True)
                assert node_id is not None
                result = await self.expand(
                    node_id, before=_int(args, "before", 0, 0, 50),
                    after=_int(args, "after", 0, 0, 50),
                    to_node_id=_str(args, "to_node_id", required=False),
                    max_tokens=_int(args, "max_tokens", self.expand_tokens, 100,
                                    self.expand_tokens))
            else:
                raise RecallInputError(f"{call.name!r} is not a recall tool")
        except (RecallInputError, StoreError) as exc:
            return ToolResultPart(call_id=call.id, name=call.name, output=str(exc),
                                  is_error=True)
        return ToolResultPart(call_id=call.id, name=call.name,
                              output=json.dumps(result, ensure_ascii=False))
