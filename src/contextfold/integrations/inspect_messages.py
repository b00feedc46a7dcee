"""Inspect AI's messages and contextfold's, both ways: a conversation read for the mirror
(`to_messages`) and a projection handed back as Inspect's own message objects
(`from_messages`), with Inspect's tool definitions as `ToolSpec`s.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

from ..errors import MissingExtraError

try:
    from inspect_ai.model import (
        ChatMessage,
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
        ContentReasoning,
        ContentText,
    )
    from inspect_ai.tool import ToolCall, ToolInfo
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise MissingExtraError.needed_by(__name__, "Inspect AI", "inspect") from exc

from ..core.values.messages import (
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ..providers.base import ToolSpec
from ..runtime.mirror import Synced
from ..wire.parts import tool_arguments

# The id of every message contextfold adds to a request (the checkpoint summary and pins,
# the recall block) starts with this: Inspect hands them back, and they are not the
# conversation's.
OWN_ID_PREFIX = "contextfold-"


def _content_parts(message: ChatMessage) -> list[Part]:
    """The text and reasoning of a message's content (media named, not carried: the
    message itself goes out verbatim whenever the projection keeps it)."""
    content = message.content
    if isinstance(content, str):
        return [TextPart(text=content)] if content else []
    parts: list[Part] = []
    for c in content:
        if isinstance(c, ContentText):
            parts.append(TextPart(text=c.text))
        elif isinstance(c, ContentReasoning):
            parts.append(ReasoningPart(text="" if c.redacted else c.reasoning,
                                       signature=c.signature))
        else:
            parts.append(TextPart(text=f"[{getattr(c, 'type', 'content')}]"))
    return parts


def to_messages(messages: Sequence[ChatMessage]) -> tuple[list[Message], list[int], str | None]:
    """Inspect messages as contextfold messages, the index in `messages` each came from,
    and the system prompt (the system messages, joined).

    An assistant message keeps its tool calls (ids, functions, arguments verbatim); each
    `ChatMessageTool` is one tool message answering its call (an error result marked so)."""
    out: list[Message] = []
    sources: list[int] = []
    system: list[str] = []
    for i, m in enumerate(messages):
        if isinstance(m, ChatMessageSystem):
            system.append(m.text)
            continue
        if isinstance(m, ChatMessageTool):
            output = m.text
            if m.error is not None:
                output = f"{output}\n{m.error.message}".strip()
            msg = Message(role="tool", parts=(ToolResultPart(
                call_id=m.tool_call_id or "tool", name=m.function, output=output,
                is_error=m.error is not None),))
        elif isinstance(m, ChatMessageAssistant):
            calls = [ToolCallPart(id=c.id, name=c.function, input=tool_arguments(c.arguments))
                     for c in m.tool_calls or ()]
            msg = Message(role="assistant", parts=(*_content_parts(m), *calls), model=m.model)
        else:
            msg = Message(role="user", parts=tuple(_content_parts(m)) or
                          (TextPart(text=""),))
        out.append(msg)
        sources.append(i)
    return out, sources, "\n\n".join(system) or None


def from_messages(synced: Synced, messages: Sequence[ChatMessage],
                  sources: Sequence[int]) -> list[ChatMessage]:
    """The projection of `synced` as Inspect messages: the original objects where a message
    goes out as it came, a copy (same id, changed content) where the projection masked or
    clipped it (SPEC V1, K6), a user message of contextfold's own for the checkpoint
    summary, pins and recall block."""
    out: list[ChatMessage] = []
    checkpoint = synced.projection.checkpoint
    for item in synced.items():
        if item.index is None:
            if item.recall:  # a turn's recall block or pin note (SPEC L5, Q5): named by its
                # bytes, which stay the same in every request until the next checkpoint
                own = "recall-" + hashlib.sha256(item.message.text.encode()).hexdigest()[:16]
            else:
                own = checkpoint.id if checkpoint is not None else "pins"
            out.append(ChatMessageUser(id=OWN_ID_PREFIX + own, content=item.message.text,
                                       metadata={"contextfold": True}))
            continue
        original = messages[sources[item.index]]
        out.append(original if item.verbatim else _changed(original, item.message))
    return out


def _changed(original: ChatMessage, message: Message) -> ChatMessage:
    """`original` with the content the projection gives it (the id kept, so Inspect and the
    next compaction know it for the same message)."""
    if isinstance(original, ChatMessageTool):
        text = "\n".join(r.output for r in message.tool_results)
        return original.model_copy(update={"content": text})
    text = "\n".join(p.text for p in message.parts if isinstance(p, TextPart))
    if isinstance(original, ChatMessageAssistant):
        by_id = {c.id: c for c in message.tool_calls}
        calls = [c if c.id not in by_id else _call(c, by_id[c.id].input)
                 for c in original.tool_calls or ()]
        return original.model_copy(update={"content": text, "tool_calls": calls or None})
    return original.model_copy(update={"content": text})


def _call(call: ToolCall, arguments: Any) -> ToolCall:
    if not isinstance(arguments, dict):
        arguments = {"input": arguments}
    # ToolCall is a dataclass (not a pydantic model like the messages)
    return call if arguments == call.arguments else dataclasses.replace(call,
                                                                        arguments=arguments)


def _tool_specs(tools: Sequence[ToolInfo]) -> tuple[ToolSpec, ...]:
    """Inspect's tool definitions as `ToolSpec`s (they travel with every request, so they
    count in contextfold's estimate)."""
    return tuple(ToolSpec(name=t.name, description=t.description or "",
                          input_schema=t.parameters.model_dump(exclude_none=True))
                 for t in tools)
