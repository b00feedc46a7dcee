"""The MCP tools' work, over the store, for one conversation at a time (SPEC L2, L4, N1).

Recall runs through the runtime's `Recall` (the same argument checks, limits and JSON as the
tools a `Conversation` offers its model); pins through `runtime.pinning` (the pin budget of
the session's model, the leaf checked before writing). Each call names the session it
acted on and how it was found, so an agent (and its user) can see which conversation it read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.models.catalog import tokenizer_family
from ..core.sizing.resolver import ModelResolver, UnknownModelError, recorded_model
from ..core.values.messages import ToolCallPart
from ..errors import ContextfoldError
from ..ids import new_id
from ..runtime.pinning import pin_stored, stored_pins
from ..runtime.recall import DEFAULT_EXPAND_TOKENS, HISTORY_EXPAND, HISTORY_SEARCH, Recall
from ..store.protocol import SessionStore
from .which import Asked, Found, which_session


class ToolFailed(ContextfoldError, Exception):
    """A tool call the agent can correct: the message is its tool error."""

    kind = "bad_input"


@dataclass
class RecallTools:
    """The four tools over `store` (already the server's tenant, SPEC W1/L4).

    `windows`: the upstream's windows by model, as `contextfold proxy --model-window` (the
    pin budget is a share of the session model's window); `expand_tokens`: the most one
    expansion returns.
    """

    store: SessionStore
    windows: Mapping[str, int] = field(default_factory=dict)
    expand_tokens: int = DEFAULT_EXPAND_TOKENS

    async def session(self, asked: Asked) -> Found:
        try:
            return await which_session(self.store, asked)
        except LookupError as exc:
            raise ToolFailed(str(exc)) from exc

    async def search(self, asked: Asked, query: str, limit: int | None = None) -> dict[str, Any]:
        """`history_search` on the conversation's branch."""
        found = await self.session(asked)
        args: dict[str, Any] = {"query": query}
        if limit is not None:
            args["limit"] = limit
        return await self._recall(found, HISTORY_SEARCH, args)

    async def expand(self, asked: Asked, node_id: str, *, before: int | None = None,
                     after: int | None = None, to_node_id: str | None = None,
                     max_tokens: int | None = None) -> dict[str, Any]:
        """`history_expand` of a node or range, within the token budget."""
        found = await self.session(asked)
        args = {k: v for k, v in {"node_id": node_id, "before": before, "after": after,
                                  "to_node_id": to_node_id, "max_tokens": max_tokens}.items()
                if v is not None}
        return await self._recall(found, HISTORY_EXPAND, args)

    async def pins(self, asked: Asked) -> dict[str, Any]:
        """The active pins, oldest first."""
        found = await self.session(asked)
        try:
            pins = await stored_pins(self.store, found.session_id)
        except (LookupError, ValueError) as exc:
            raise ToolFailed(str(exc)) from exc
        return {**_where(found), "pins": [p.model_dump(mode="json", exclude_none=True)
                                           for p in pins]}

    async def pin(self, asked: Asked, text: str | None = None,
                  node_id: str | None = None) -> dict[str, Any]:
        """Pin a short text or a message of the branch (checked against the pin budget)."""
        found = await self.session(asked)
        try:
            budget, family = await self._pin_budget(found.session_id)
            pin = await pin_stored(self.store, found.session_id, pin_budget=budget,
                                   text=text or None, node_id=node_id or None, family=family)
        except (LookupError, ValueError) as exc:  # refused, not on the branch, stale
            raise ToolFailed(str(exc)) from exc
        return {**_where(found), "pinned": pin.model_dump(mode="json", exclude_none=True),
                "pin_budget_tokens": budget}

    # ------------------------------------------------------------------ internals

    async def _recall(self, found: Found, name: str, args: dict[str, Any]) -> dict[str, Any]:
        recall = Recall(self.store, found.session_id, expand_tokens=self.expand_tokens)
        result = await recall.run(ToolCallPart(id=new_id(), name=name, input=args))
        if result.is_error:
            raise ToolFailed(result.output)
        return {**_where(found), **json.loads(result.output)}

    async def _pin_budget(self, session_id: str) -> tuple[int, str | None]:
        """The pin budget of the session's model: the one the proxy recorded, else the
        branch's; its window as the proxy sizes it (`windows`)."""
        info = await self.store.get_session(session_id)
        proxy = info.metadata.get("proxy")
        model = proxy.get("model") if isinstance(proxy, dict) else None
        if not isinstance(model, str) or not model:
            model = recorded_model(await self.store.load_branch(session_id))
        resolver = ModelResolver(windows=dict(self.windows))
        try:
            resolved = resolver.resolve(model or None)
        except UnknownModelError:  # a local model with no window given: the default's
            resolved = resolver.resolve(recorded=model)
        family = resolved.capacity.family or tokenizer_family(resolved.name)
        return resolved.budget.pin_budget, family


def _where(found: Found) -> dict[str, Any]:
    return {"session_id": found.session_id, "found_by": found.how}
