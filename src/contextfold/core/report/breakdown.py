"""Where the next request's tokens go, by category, and the free space left (like Claude
Code's `/context`): system prompt, tools, checkpoint summary, pins, recalled excerpts (L5),
tail messages, tool results, free.

Each part is estimated with the conversation's own `MessageCosts` memo, so the parts are
the estimator's numbers, never a second guess. When the request's total is measured (the
last reply's reported usage plus what came after, SPEC E1) the history's parts (checkpoint,
recall, tail messages, tool results) are scaled to add up to that total exactly, so the
breakdown and the context gauge never disagree. The fixed parts — system prompt, tool
definitions, pins — are sent exactly as estimated and are never scaled: a measured total
that is larger than the estimate (an imported session's usage counted the recording agent's
own prompt and tools) is history, not tools, and a request without tools shows 0 tools.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..planning.cost_trigger import session_rhythm
from ..sizing.estimator import MessageCosts
from ..values.messages import Node
from ..view.pins import pins_text
from ..view.projection import Projection

CATEGORIES = ("system", "tools", "checkpoint", "pins", "recall", "messages", "tool_results")
# Sent as they are estimated: never scaled to a measured total (module docstring).
FIXED = ("system", "tools", "pins")


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
    if projection.sent_pins:
        parts["pins"] = costs.text_tokens(pins_text(projection.sent_pins))
    # SPEC Q5: a pin or unpin since the checkpoint, sent where it happened.
    parts["pins"] += sum(costs.text_tokens(n.text) for n in projection.pin_notes)
    if projection.recalled:
        parts["recall"] = sum(costs.text_tokens(b.text) for b in projection.recalled)
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
    """The next request by category, adding up to `used` (the gauge's tokens): the fixed
    parts as estimated, the history's parts scaled to the rest (all of them scaled only when
    the measured total is smaller than the fixed parts alone)."""
    parts = estimated_parts(projection, costs, system=system, tools=tools)
    scaled = sum(parts.values()) != used
    fixed = {k: parts[k] for k in FIXED}
    rest = used - sum(fixed.values())
    if not scaled or rest < 0:
        return ContextBreakdown(scale_parts(parts, used), max(0, used), limit, scaled)
    history = scale_parts({k: v for k, v in parts.items() if k not in FIXED}, rest)
    return ContextBreakdown({k: fixed.get(k, history.get(k, 0)) for k in CATEGORIES},
                            max(0, used), limit, scaled)


def full_history_tokens(nodes: Sequence[Node], costs: MessageCosts, *, system: str | None,
                        tools: Sequence[Mapping[str, Any]] | None) -> int:
    """What the next request would hold without compaction: every message of the branch
    verbatim, the system prompt and the tools (what "tokens saved" is measured against)."""
    body = sum(costs(n) for n in nodes if n.message is not None)
    return body + costs.system_tokens(system) + costs.tools_tokens(tools)


def saved_tokens(full_history: int, used: int) -> int:
    """What compaction saves on the next request: the whole history's tokens minus the
    request's. Negative when the request is larger (a summary outweighing what it folded):
    a loss, which every face shows as one, never as 0."""
    return full_history - used


@dataclass(frozen=True)
class NextCompaction:
    """When the next automatic compaction is expected (SPEC A1): the request reaches the
    automatic threshold after `tokens_to_go` more tokens, which at the session's pace (the
    tokens its kept messages added per model request and per user turn) is about `requests`
    requests, `turns` turns (None: no pace to go by yet). With the cost trigger (Q2) it may
    come earlier, when compacting is cheaper than carrying the context on."""

    threshold: int
    tokens_to_go: int
    requests: int | None
    turns: int | None

    def to_json(self) -> dict[str, Any]:
        return {"auto_threshold": self.threshold, "tokens_to_go": self.tokens_to_go,
                "requests": self.requests, "turns": self.turns}


def next_compaction(projection: Projection, costs: MessageCosts, *, used: int,
                    threshold: int) -> NextCompaction:
    """The next automatic compaction's expected moment, at the pace of the projection's
    messages (what the cost trigger's forecast steps by, `core.planning.cost_trigger`)."""
    to_go = max(0, threshold - used)
    nodes = [n for n in projection.messages if n.message is not None]
    rhythm = session_rhythm([n.message.role for n in nodes if n.message is not None],
                            [costs(n) for n in nodes])
    if to_go == 0:
        return NextCompaction(threshold, 0, 0, 0)
    if rhythm.requests == 0 or rhythm.tokens <= 0:
        return NextCompaction(threshold, to_go, None, None)
    per_request = rhythm.per_request
    per_turn = per_request * rhythm.requests_per_turn if rhythm.turns else None
    return NextCompaction(threshold, to_go, -(-to_go // max(1, round(per_request))),
                          -(-to_go // max(1, round(per_turn))) if per_turn else None)


def history_figures(history: Sequence[Node], costs: MessageCosts, *, system: str | None,
                    tools: Sequence[Mapping[str, Any]] | None) -> tuple[int, int]:
    """What the whole `history` (the branch, root to leaf) would take in one request, and
    how many checkpoints it holds: what a saving is measured against."""
    return (full_history_tokens(history, costs, system=system, tools=tools),
            sum(1 for n in history if n.checkpoint is not None))


def context_report(projection: Projection, costs: MessageCosts, *, system: str | None,
                   tools: Sequence[Mapping[str, Any]] | None, used: int, method: str,
                   limit: int, threshold: int, context_window: int, full_history: int,
                   checkpoints: int) -> dict[str, Any]:
    """The whole `/context` answer every face gives (the service's `GET /context`, the
    chat's `/context`, `contextfold context`): the breakdown by category adding up to `used`,
    the free space, the next compaction's expected moment, and the saving against the
    whole history (`history_figures`)."""
    out = context_breakdown(projection, costs, system=system, tools=tools, used=used,
                            limit=limit)
    return {**out.to_json(), "method": method, "context_window": context_window,
            "auto_threshold": threshold,
            "next_compaction": next_compaction(projection, costs, used=used,
                                               threshold=threshold).to_json(),
            "full_history_tokens": full_history,
            "saved_tokens": saved_tokens(full_history, out.used),
            "checkpoints": checkpoints}


__all__ = ["CATEGORIES", "FIXED", "ContextBreakdown", "NextCompaction", "context_breakdown",
           "context_report", "estimated_parts", "full_history_tokens", "history_figures",
           "next_compaction", "saved_tokens", "scale_parts"]
