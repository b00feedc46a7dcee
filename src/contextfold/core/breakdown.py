"""Where the next request's tokens go, by category, and the free space left (like Claude
Code's `/context`): system prompt, tools, checkpoint summary, pins, tail messages, tool
results, free.

Each part is estimated with the conversation's own `MessageCosts` memo, so the parts are
the estimator's numbers, never a second guess. When the request's total is measured (the
last reply's reported usage plus what came after, SPEC E1) the estimated parts are scaled
to add up to that total exactly, so the breakdown and the context gauge never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .estimator import MessageCosts
from .messages import Node
from .pins import pins_text
from .projection import Projection

CATEGORIES = ("system", "tools", "checkpoint", "pins", "messages", "tool_results")


@dataclass(frozen=True)
class ContextBreakdown:
    """Tokens per category (adding up to `used`), the safe input limit and what is free.

    `scaled`: the parts were scaled from their estimates to a measured `used`.
    """

    parts: dict[str, int]
    used: int
    limit: int
    scaled: bool

    @property
    def free(self) -> int:
        return max(0, self.limit - self.used)

    def to_json(self) -> dict[str, Any]:
        return {"parts": dict(self.parts), "used": self.used, "limit": self.limit,
                "free": self.free, "scaled": self.scaled}


def estimated_parts(projection: Projection, costs: MessageCosts, *, system: str | None,
                    tools: Sequence[Mapping[str, Any]] | None) -> dict[str, int]:
    """Each category's estimate for the next request (before any scaling)."""
    parts = dict.fromkeys(CATEGORIES, 0)
    parts["system"] = costs.system_tokens(system)
    parts["tools"] = costs.tools_tokens(tools)
    if projection.checkpoint is not None:
        parts["checkpoint"] = costs(projection.checkpoint)
    if projection.pins:
        parts["pins"] = costs.text_tokens(pins_text(projection.pins))
    for node in projection.messages:
        msg = node.message
        if msg is None:
            continue
        # SPEC K6: a clipped tool result counts as sent, not as stored.
        tokens = costs.measure(projection.message_of(node)) if node.id in projection.clips \
            else costs(node)
        tool = msg.role == "tool" or bool(msg.tool_results)
        parts["tool_results" if tool else "messages"] += tokens
    return parts


def scale_parts(parts: Mapping[str, int], total: int) -> dict[str, int]:
    """`parts` scaled to add up to `total` exactly (largest remainder; all zero: the
    whole total counts as messages)."""
    total = max(0, total)
    raw = sum(parts.values())
    if raw == total:
        return dict(parts)
    if raw <= 0:
        return {**dict.fromkeys(parts, 0), "messages": total}
    exact = {k: v * total / raw for k, v in parts.items()}
    out = {k: int(v) for k, v in exact.items()}
    rest = total - sum(out.values())
    for key in sorted(exact, key=lambda k: exact[k] - out[k], reverse=True)[:rest]:
        out[key] += 1
    return out


def context_breakdown(projection: Projection, costs: MessageCosts, *, system: str | None,
                      tools: Sequence[Mapping[str, Any]] | None, used: int,
                      limit: int) -> ContextBreakdown:
    """The next request by category, adding up to `used` (the gauge's tokens)."""
    parts = estimated_parts(projection, costs, system=system, tools=tools)
    scaled = sum(parts.values()) != used
    return ContextBreakdown(scale_parts(parts, used), max(0, used), limit, scaled)


def full_history_tokens(nodes: Sequence[Node], costs: MessageCosts, *, system: str | None,
                        tools: Sequence[Mapping[str, Any]] | None) -> int:
    """What the next request would hold without compaction: every message of the branch
    verbatim, the system prompt and the tools (what "tokens saved" is measured against)."""
    body = sum(costs(n) for n in nodes if n.message is not None)
    return body + costs.system_tokens(system) + costs.tools_tokens(tools)


__all__ = ["CATEGORIES", "ContextBreakdown", "context_breakdown", "estimated_parts",
           "full_history_tokens", "scale_parts"]
