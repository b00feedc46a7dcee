"""Observation masking in the projection (SPEC V1): old tool output becomes a placeholder.

A checkpoint may carry `masked_before_id`: in the raw history before that node, every large
tool result is projected as a short placeholder that keeps the tool's name, its arguments,
the identifiers in the output, the output's size and a recall handle (the node id, for
`history_expand`). The durable node never changes; the placeholder is a projection-only copy
(`MaskedNode`). The placeholder is a pure function of the stored node and its call, so the
projection stays deterministic and byte-stable (prompt caches keep working) until the next
checkpoint.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence

from ..text.identifiers import extract_identifiers
from ..values.messages import (
    EpubLocationPart,
    Message,
    Node,
    PdfPagePart,
    ToolCallPart,
    ToolResultPart,
)
from ..values.resources import clip_middle

# Outputs at most this long stay raw: a placeholder would not be much shorter.
MASK_MIN_CHARS = 1_200
ARGUMENT_CHARS = 240
MAX_IDENTIFIERS = 12
MASK_MARKER = "[masked tool result]"
# The `summarizer` name of a masking checkpoint (here, not in the planner, so a reader of
# checkpoints such as `core.money.costs` does not import the planner).
MASKING_SUMMARIZER = "masking"

MASKING_NOTE = (
    "Older tool results marked [masked tool result] were replaced by a placeholder to save "
    "space; the full output is kept in the session history under the node id shown "
    "(history_expand(node_id) reads it back where that tool is offered)."
)


class MaskedNode(Node):
    """A projection-only copy of a tool node with its large outputs masked. Never stored."""


def _size(text: str) -> str:
    lines = text.count("\n") + 1
    return f"{len(text):,} characters, {lines:,} lines"


def placeholder(node_id: str, result: ToolResultPart, call: ToolCallPart | None,
                identifiers: Sequence[str]) -> str:
    """The text that stands for `result` in the projection (deterministic)."""
    name = (call.name if call is not None else None) or result.name or "tool"
    lines = [f"{MASK_MARKER} {name}"]
    if call is not None:
        args = json.dumps(call.input, ensure_ascii=False, sort_keys=True, default=str)
        lines.append("arguments: " + clip_middle(args, ARGUMENT_CHARS).replace("\n", " "))
    status = "error" if result.is_error else "denied" if result.denied else "ok"
    lines.append(f"output: {_size(result.output)} ({status})")
    if identifiers:
        lines.append("identifiers: " + "; ".join(identifiers[:MAX_IDENTIFIERS]))
    lines.append(f'recall: history_expand("{node_id}")')
    return "\n".join(lines)


def maskable(msg: Message) -> bool:
    """Whether masking `msg` would replace anything."""
    for part in msg.parts:
        if isinstance(part, ToolResultPart) and len(part.output) > MASK_MIN_CHARS:
            return True
        if isinstance(part, PdfPagePart | EpubLocationPart) and len(part.text) > MASK_MIN_CHARS:
            return True
    return False


def mask_node(node: Node, calls: dict[str, ToolCallPart]) -> Node:
    """`node` with its large tool outputs replaced by placeholders (or `node` itself)."""
    msg = node.message
    if msg is None or not maskable(msg):
        return node
    found = [e.value for e in extract_identifiers([node])]
    parts = []
    for part in msg.parts:
        if isinstance(part, ToolResultPart) and len(part.output) > MASK_MIN_CHARS:
            text = placeholder(node.id, part, calls.get(part.call_id), found)
            part = part.model_copy(update={"output": text})
        elif isinstance(part, PdfPagePart | EpubLocationPart) and len(part.text) > MASK_MIN_CHARS:
            part = part.model_copy(update={"text": f"{MASK_MARKER} {_size(part.text)}"})
        parts.append(part)
    masked = msg.model_copy(update={"parts": tuple(parts)})
    return MaskedNode(id=node.id, parent_id=node.parent_id, created_at=node.created_at,
                      payload=masked)


# Masked copies of recently projected nodes: a conversation projects the same nodes before
# every request, and a placeholder is a pure function of its node (and the node's call,
# fixed by the tree). Keyed by the node object itself (held in the entry, so its id() cannot
# be reused while cached); bounded, so it never grows with the history.
_CACHE_SIZE = 4_096
_masked: OrderedDict[tuple[str, int], tuple[Node, Node]] = OrderedDict()


def _cached_mask(node: Node, calls: dict[str, ToolCallPart]) -> Node:
    key = (node.id, id(node))
    hit = _masked.get(key)
    if hit is not None and hit[0] is node:
        return hit[1]
    masked = mask_node(node, calls)
    _masked[key] = (node, masked)
    while len(_masked) > _CACHE_SIZE:  # oldest first out (FIFO: no reordering on a hit)
        try:
            _masked.popitem(last=False)
        except KeyError:  # emptied by another thread meanwhile
            break
    return masked


def apply_mask(messages: Sequence[Node], mask_before_id: str | None) -> tuple[Node, ...]:
    """`messages` (raw, oldest first) with tool results before `mask_before_id` masked.

    Nothing is masked when `mask_before_id` is None or not among `messages` (a later
    summary moved the raw region past it).
    """
    if mask_before_id is None:
        return tuple(messages)
    cut = next((i for i, n in enumerate(messages) if n.id == mask_before_id), None)
    if cut is None:
        return tuple(messages)
    calls: dict[str, ToolCallPart] = {}
    out: list[Node] = []
    for node in messages[:cut]:
        msg = node.message
        if msg is not None:
            calls.update((c.id, c) for c in msg.tool_calls)
        out.append(_cached_mask(node, calls))
    return (*out, *messages[cut:])
