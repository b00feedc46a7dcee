"""Conservative token estimates (SPEC E1-E5).

PLACEHOLDER: the estimator engineer replaces this module; the names and signatures here are
the contract other modules rely on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .budget import ModelCapacity
from .messages import RESOURCE_PART_TYPES as _RESOURCES
from .messages import FilePart, Message, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from .projection import Projection, checkpoint_text
from .resources import render_resource


def estimate_text(text: str, family: str | None = None) -> int:
    """A conservative (never under-counting) token estimate of `text`."""
    cjk = sum(1 for ch in text if ord(ch) >= 0x2E80)
    return cjk * 2 + (len(text) - cjk) // 2 + 1


def estimate_message(msg: Message, capacity: ModelCapacity | None = None) -> int:
    total = 4
    for part in msg.parts:
        if isinstance(part, TextPart):
            total += estimate_text(part.text)
        elif isinstance(part, ReasoningPart):
            if capacity is not None and capacity.replays_reasoning:
                total += estimate_text(part.text)
        elif isinstance(part, ToolCallPart):
            total += estimate_text(part.name + json.dumps(part.input, ensure_ascii=False)) + 8
        elif isinstance(part, ToolResultPart):
            total += estimate_text(part.output) + 8
        elif isinstance(part, FilePart):
            total += capacity.image_tokens if capacity is not None else 1600
        elif isinstance(part, _RESOURCES):
            total += estimate_text(render_resource(part))  # type: ignore[arg-type]
    return total


@dataclass(frozen=True)
class Estimate:
    tokens: int
    method: Literal["usage+delta", "estimated"]
    baseline_node_id: str | None = None
    breakdown: dict[str, int] = field(default_factory=dict)


def estimate_request(
    projection: Projection,
    capacity: ModelCapacity,
    *,
    system: str | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
    pending: Sequence[Message] = (),
    system_changed: bool = False,
    counter: Callable[[str], int] | None = None,
) -> Estimate:
    sys_tokens = estimate_text(system) if system else 0
    tool_tokens = estimate_text(json.dumps(list(tools))) if tools else 0
    pend = sum(estimate_message(m, capacity) for m in pending)
    body = sum(estimate_message(n.payload, capacity) for n in projection.messages)  # type: ignore[arg-type]
    if projection.summary is not None:
        body += estimate_text(checkpoint_text(projection.summary))
    return Estimate(
        tokens=sys_tokens + tool_tokens + pend + body,
        method="estimated",
        breakdown={"system": sys_tokens, "tools": tool_tokens, "pending": pend, "delta": body},
    )
