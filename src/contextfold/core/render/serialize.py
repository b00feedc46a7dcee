"""History → plain text for the summariser (SPEC R1-R6), and chunks under a hard size bound.

The summariser reads the conversation as *data*, not as a chat it should continue, so every
message becomes a labelled block of text:

* R1 text keeps its content under a role label (`[User]`, `[Assistant]`, `[System]`);
* R2 reasoning is left out;
* R3 tool calls keep their input as `name(args-json)`; long inputs and long results are
  clipped head + tail with a visible marker;
* R4 tool errors, denials and approval decisions are stated explicitly;
* R5 files become `[file: name (mime)]`, never bytes;
* R6 Zotero resources are rendered by `core.values.resources.render_resource`.

`serialize_chunk` guarantees its result fits a token bound: when normal clipping is not
enough it clips harder, message by message, but it never drops a message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any

from pydantic import Field

from ...errors import ContextfoldError
from ..sizing.estimator import estimate_text
from ..text.text_estimate import Count
from ..values.messages import (
    RESOURCE_PART_TYPES,
    ApprovalPart,
    FilePart,
    Message,
    Node,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Value,
)
from ..values.resources import clip_middle, render_resource

PositiveChars = Annotated[int, Field(gt=0)]

BLOCK_SEPARATOR = "\n\n"
ROLE_LABELS = {"user": "[User]", "assistant": "[Assistant]", "system": "[System]"}

# `for_budget` scales the default limits down linearly below this summariser input size;
# above it, the defaults already leave room for dozens of messages per chunk.
_FULL_LIMITS_AT_TOKENS = 64_000
_MIN_SCALE = 0.1


class SerializeLimits(Value):
    """Character limits applied while serialising (SPEC R3, R6)."""

    tool_result_chars: PositiveChars = 1000
    tool_args_chars: PositiveChars = 800
    resource_text_chars: PositiveChars = 1000

    @classmethod
    def for_budget(cls, summarizer_tokens: int) -> SerializeLimits:
        """Limits for a summariser whose input holds about `summarizer_tokens` tokens.

        A small model gets proportionally shorter clips, so one tool result cannot fill
        most of its input; a large model gets the defaults.
        """
        if summarizer_tokens <= 0:
            raise ValueError(f"summarizer_tokens must be positive, got {summarizer_tokens}")
        scale = max(_MIN_SCALE, min(1.0, summarizer_tokens / _FULL_LIMITS_AT_TOKENS))
        base = cls()
        return cls(
            tool_result_chars=max(1, int(base.tool_result_chars * scale)),
            tool_args_chars=max(1, int(base.tool_args_chars * scale)),
            resource_text_chars=max(1, int(base.resource_text_chars * scale)),
        )

    def scaled(self, factor: float) -> SerializeLimits:
        """These limits multiplied by `factor` (at least one character each)."""
        return SerializeLimits(
            tool_result_chars=max(1, int(self.tool_result_chars * factor)),
            tool_args_chars=max(1, int(self.tool_args_chars * factor)),
            resource_text_chars=max(1, int(self.resource_text_chars * factor)),
        )


# A line of content must never read as one of the serialiser's own labels: the summariser
# (and anyone parsing the text) would take a tool output holding "\n\n[User]\n..." for a real
# user turn. Every line of untrusted text (message text, tool output and arguments, names,
# resource text) whose first visible character is "[" gets a backslash before it. Lines are
# cut the way `str.splitlines` cuts them (\r, \u2028, ... too), the widest a parser may use.
_CLIP_MARKER = re.compile(r"\[… \d+ \w+ omitted …\]")


def escape_data(text: str) -> str:
    """`text` with no line that could be read as a serialiser label (see above)."""
    if "[" not in text:
        return text
    out = []
    for line in text.splitlines(keepends=True):
        body = line.lstrip()
        if body.startswith("[") and not _CLIP_MARKER.fullmatch(body.rstrip("\r\n")):
            cut = len(line) - len(body)
            line = f"{line[:cut]}\\{body}"
        out.append(line)
    return "".join(out)


class ChunkBudgetTooSmall(ContextfoldError, ValueError):
    """Even the shortest form of every message (its label) does not fit the chunk bound."""

    kind = "bad_input"


# --------------------------------------------------------------------------- messages


def _args_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=False, default=str)


def _result_label(result: ToolResultPart, tool_names: Mapping[str, str]) -> str:
    name = escape_data(result.name or tool_names.get(result.call_id) or result.call_id)
    label = f"[Tool result: {name}]"
    if result.denied:
        return f"{label} [Denied by user]"
    if result.is_error:
        return f"{label} [Tool error]"
    return label


def _approval_line(part: ApprovalPart, tool_names: Mapping[str, str]) -> str:
    name = tool_names.get(part.call_id)
    call = escape_data(f"{name} (call {part.call_id})" if name else f"call {part.call_id}")
    if part.state == "rejected":
        return f"[Approval rejected] the user rejected tool {call}"
    if part.state == "approved":
        return f"[Approval granted] the user approved tool {call}"
    return f"[Approval pending] tool {call} awaits the user's decision"


def _status_note(msg: Message) -> str | None:
    if msg.status == "error":
        return "[Reply failed: the provider returned an error]"
    if msg.status == "aborted":
        return "[Reply aborted before it completed]"
    if msg.status == "streaming":
        return "[Reply still streaming: incomplete]"
    return None


def serialize_message(
    msg: Message,
    limits: SerializeLimits | None = None,
    *,
    tool_names: Mapping[str, str] | None = None,
) -> str:
    """One message as a labelled block of plain text ("" when nothing is visible).

    `tool_names` maps tool call ids to tool names, so a result without its own name can
    still say which tool produced it (`serialize_nodes` builds it from the calls it sees).
    """
    limits = limits or SerializeLimits()
    names = tool_names or {}
    lines: list[str] = []
    label = ROLE_LABELS.get(msg.role)
    for part in msg.parts:
        if isinstance(part, ReasoningPart):
            continue  # R2
        if isinstance(part, TextPart):
            if part.text.strip():
                lines.append(escape_data(part.text))
        elif isinstance(part, ToolCallPart):
            args = clip_middle(_args_text(part.input), limits.tool_args_chars)
            lines.append(escape_data(f"[Tool call] {part.name}({args})")[1:])
        elif isinstance(part, ToolResultPart):
            # Each result carries its own label: a tool message may hold several.
            output = escape_data(clip_middle(part.output, limits.tool_result_chars))
            lines.append(_result_label(part, names) + (f"\n{output}" if output else ""))
        elif isinstance(part, ApprovalPart):
            lines.append(_approval_line(part, names))
        elif isinstance(part, FilePart):
            lines.append(escape_data(f"[file: {part.name} ({part.media_type})]")[1:])
        elif isinstance(part, RESOURCE_PART_TYPES):
            text = render_resource(part, text_limit=limits.resource_text_chars)  # type: ignore[arg-type]
            head, newline, rest = text.partition("\n")
            lines.append(escape_data(head)[head.startswith("[") :] + newline + escape_data(rest))
    note = _status_note(msg)
    if note is not None:
        lines.append(note)
    if not lines:
        return ""
    if msg.role == "tool":
        # Tool messages start with their first result's label; anything else in them
        # (resources, files) follows under it.
        if not lines[0].startswith("[Tool result:"):
            lines.insert(0, "[Tool result]")
        return "\n".join(lines)
    return "\n".join([label or f"[{msg.role}]", *lines])


def tool_names_of(nodes: Iterable[Node]) -> dict[str, str]:
    """Map every tool call id among `nodes` to its tool name."""
    names: dict[str, str] = {}
    for node in nodes:
        msg = node.message
        if msg is not None:
            for call in msg.tool_calls:
                names[call.id] = call.name
    return names


def _blocks(
    nodes: Sequence[Node], limits: SerializeLimits, names: Mapping[str, str]
) -> list[str]:
    """Serialised blocks of the message nodes (checkpoints and invisible messages skipped)."""
    out = []
    for node in nodes:
        msg = node.message
        if msg is None:
            continue
        block = serialize_message(msg, limits, tool_names=names)
        if block:
            out.append(block)
    return out


def serialize_nodes(nodes: Sequence[Node], limits: SerializeLimits | None = None) -> str:
    """The message nodes of `nodes` as summariser text; checkpoint nodes are skipped."""
    limits = limits or SerializeLimits()
    return BLOCK_SEPARATOR.join(_blocks(nodes, limits, tool_names_of(nodes)))


# --------------------------------------------------------------------------- chunking


def split_into_chunks(
    nodes: Sequence[Node],
    max_tokens: int,
    limits: SerializeLimits | None = None,
    count: Count = estimate_text,
    *,
    sizes: Mapping[str, int] | None = None,
) -> tuple[tuple[Node, ...], ...]:
    """Split the message nodes greedily into consecutive chunks of at most `max_tokens`.

    `sizes` (node id -> tokens), when the caller already measured the messages, are used
    instead of serialising and counting them again: a message's full estimate bounds its
    clipped serialisation, and `serialize_chunk` enforces the hard bound at summary time.

    Every message node lands in exactly one chunk, in order; checkpoint nodes are left
    out. A message whose serialised form alone exceeds the bound gets a chunk of its own
    (`serialize_chunk` then clips it harder). Sizes are summed per block, and each closed
    chunk is re-measured as a whole, so a counter that is not additive still cannot make
    a multi-message chunk overflow.
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if sizes is not None:
        return _split_by_sizes(nodes, max_tokens, sizes)
    limits = limits or SerializeLimits()
    names = tool_names_of(nodes)
    sep_cost = count(BLOCK_SEPARATOR)
    chunks: list[tuple[Node, ...]] = []
    current: list[tuple[Node, str]] = []
    used = 0
    has_text = False  # a separator is written only between two non-empty blocks
    for node in nodes:
        msg = node.message
        if msg is None:
            continue
        block = serialize_message(msg, limits, tool_names=names)
        extra = (count(block) if block else 0) + (sep_cost if has_text and block else 0)
        if current and used + extra > max_tokens:
            chunks.extend(_verified(current, max_tokens, count))
            current, used, has_text = [], 0, False
            extra = count(block) if block else 0
        current.append((node, block))
        used += extra
        has_text = has_text or bool(block)
    if current:
        chunks.extend(_verified(current, max_tokens, count))
    return tuple(chunks)


def _split_by_sizes(
    nodes: Sequence[Node], max_tokens: int, sizes: Mapping[str, int]
) -> tuple[tuple[Node, ...], ...]:
    chunks: list[tuple[Node, ...]] = []
    current: list[Node] = []
    used = 0
    for node in nodes:
        if node.message is None:
            continue
        size = sizes[node.id]
        if current and used + size > max_tokens:
            chunks.append(tuple(current))
            current, used = [], 0
        current.append(node)
        used += size
    if current:
        chunks.append(tuple(current))
    return tuple(chunks)


def _verified(
    group: list[tuple[Node, str]], max_tokens: int, count: Count
) -> list[tuple[Node, ...]]:
    """Split `group` so each multi-message part, measured as a whole, fits the bound."""
    out: list[tuple[Node, ...]] = []
    pending = group
    while pending:
        k = len(pending)
        while k > 1 and count(BLOCK_SEPARATOR.join(b for _, b in pending[:k] if b)) > max_tokens:
            k -= 1
        out.append(tuple(n for n, _ in pending[:k]))
        pending = pending[k:]
    return out


def serialize_chunk(
    nodes: Sequence[Node],
    max_tokens: int,
    limits: SerializeLimits | None = None,
    count: Count = estimate_text,
) -> str:
    """Serialise `nodes` so that `count(result) <= max_tokens`, keeping every message.

    Order of effort: the given limits; then tighter limits (each tool result, argument
    list and resource clipped shorter); then each message's body clipped head + tail
    under a shared cap, its label always kept. Raises `ChunkBudgetTooSmall` only when
    even the labels of the messages cannot fit: nothing is ever dropped silently.
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    limits = limits or SerializeLimits()
    names = tool_names_of(nodes)
    for factor in (1.0, 0.5, 0.25, 0.1, 0.05):
        blocks = _blocks(nodes, limits.scaled(factor), names)
        text = BLOCK_SEPARATOR.join(blocks)
        if count(text) <= max_tokens:
            return text
    return _fit_blocks(blocks, max_tokens, count)


def _minimal(block: str, *, terse: bool = False) -> str:
    """The shortest form of a block: its label line and a note that its body was cut."""
    label, _, body = block.partition("\n")
    if not body:
        return label
    return f"{label} […]" if terse else f"{label} [… {len(body)} characters omitted …]"


def _clip_block(block: str, cap: int) -> str:
    """Clip a block's body to about `cap` characters, keeping its label line."""
    if len(block) <= cap:
        return block
    label, _, body = block.partition("\n")
    room = cap - len(label) - 1
    if room <= 0 or not body:
        return _minimal(block)
    return f"{label}\n{clip_middle(body, room)}"


def _fit_blocks(blocks: list[str], max_tokens: int, count: Count) -> str:
    """Clip the largest blocks to a shared character cap until the whole text fits."""
    minimal = BLOCK_SEPARATOR.join(_minimal(b) for b in blocks)
    terse = BLOCK_SEPARATOR.join(_minimal(b, terse=True) for b in blocks)
    if count(terse) > max_tokens:
        raise ChunkBudgetTooSmall(
            f"a chunk bound of {max_tokens} tokens cannot hold even the labels of "
            f"{len(blocks)} messages ({count(terse)} tokens); raise the bound or pass "
            "fewer messages per chunk"
        )
    text = BLOCK_SEPARATOR.join(blocks)
    chars_per_token = max(len(text) / max(count(text), 1), 0.01)
    target = int(max_tokens * chars_per_token * 0.95)
    for _ in range(30):
        cap = _water_level(blocks, target)
        text = BLOCK_SEPARATOR.join(_clip_block(b, cap) for b in blocks)
        tokens = count(text)
        if tokens <= max_tokens:
            return text
        # Shrink the character target by how far over we are (and at least 10%).
        target = int(target * min(0.9, max_tokens / tokens * 0.95))
        if target <= 0:
            break
    return minimal if count(minimal) <= max_tokens else terse


def _water_level(blocks: list[str], target_chars: int) -> int:
    """The largest per-block cap `c` with sum(min(len(b), c)) <= target_chars."""
    sizes = sorted(len(b) for b in blocks)
    remaining = max(target_chars, 0)
    for i, size in enumerate(sizes):
        share = remaining // (len(sizes) - i)
        if size > share:
            return share
        remaining -= size
    return sizes[-1] if sizes else 0
