"""The reference row: no compaction at all, the whole history in every request (stdlib only).

It shows what the workload itself does: that it is valid (0 invalid requests) and how far
past the safe limit an uncompacted session would go.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from .common import Neutral


def neutral_to_openai(msgs: Sequence[Neutral]) -> list[dict[str, Any]]:
    """Neutral messages as chat-completions messages, one for one."""
    return [_converted(m) for m in msgs]


# Workload messages never change, so each is converted once (keyed by identity; the message
# is kept alive with its conversion so an id is never reused while cached).
_CONVERTED: dict[int, tuple[Neutral, dict[str, Any]]] = {}


def _converted(m: Neutral) -> dict[str, Any]:
    hit = _CONVERTED.get(id(m))
    if hit is not None and hit[0] is m:
        return hit[1]
    if m["role"] == "tool":
        out = {"role": "tool", "tool_call_id": m["call_id"], "content": m["text"]}
    elif m["role"] == "assistant":
        out = {"role": "assistant", "content": m["text"]}
        if m["calls"]:
            out["tool_calls"] = [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
                for c in m["calls"]
            ]
    else:
        out = {"role": m["role"], "content": m["text"]}
    if len(_CONVERTED) > 500_000:
        _CONVERTED.clear()
    _CONVERTED[id(m)] = (m, out)
    return out


class FullHistory:
    """Sends everything, always."""

    name = "none (full history)"

    def __init__(self, summarize: Callable[[str], str]) -> None:
        del summarize
        self.messages: list[Neutral] = []

    def ingest(self, new: Sequence[Neutral]) -> None:
        self.messages.extend(new)

    def decide(self) -> list[Neutral]:
        return self.messages

    def to_openai(self, request: list[Neutral]) -> list[dict[str, Any]]:
        return neutral_to_openai(request)
