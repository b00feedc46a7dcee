"""A projection as a ready-to-send provider request body (messages only, no model/tools)."""

from __future__ import annotations

from typing import Any, Literal

from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.view.projection import Projection


def export_session(projection: Projection, format: Literal["openai", "anthropic"] = "openai",
                   system: str | None = None) -> dict[str, Any]:
    """`{"messages": [...]}` (OpenAI, system first) or `{"system": ..., "messages": [...]}`.

    Built with `core.render.export`, so the list is one the provider accepts whatever the history
    holds. Anthropic's `system` key is left out when there is no system prompt (the API
    rejects a null one). Use `core.render.export` directly to see the repairs it made.
    """
    if format == "openai":
        return {"messages": to_openai(projection, system=system).messages}
    if format == "anthropic":
        body: dict[str, Any] = {}
        if system:
            body["system"] = system
        body["messages"] = to_anthropic(projection, system=system).messages
        return body
    raise ValueError(f"unknown export format {format!r}; choose 'openai' or 'anthropic'")
