"""LangChain messages <-> contextfold messages, and the projection as LangChain messages.

`to_message` turns one LangChain message into the durable `Message` the store keeps
(text, reasoning, tool calls with their ids and arguments, tool results with their call id,
usage from `usage_metadata`). `projected_messages` goes the other way for what the model is
shown: the checkpoint summary and pins as one `HumanMessage`, then the verbatim tail as the
application's *own* message objects (ids, `response_metadata`, `additional_kwargs` kept),
rebuilt only where the projection changed them (a masked or clipped tool result).

The tail is then settled like the core's export (`core/render/export.py`): a tool result is kept
only right after the AI message that called it, a call without a result right after it is
dropped, and the first message is a user message. A history that LangChain itself left
broken (an interrupted run with open tool calls, a trimmed state) cannot produce an invalid
request; every repair is reported.

Only `contextfold.integrations.langchain*` imports LangChain; the core never does.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from ..core.render.export import CONTINUATION_PLACEHOLDER
from ..core.values.messages import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    Role,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from ..wire.parts import tool_arguments
from ..wire.usage import usage_cache_inside

# Id prefix of the message that carries the checkpoint summary: stable per checkpoint, so a
# trace shows the same id for the same summary.
SUMMARY_ID_PREFIX = "contextfold-checkpoint-"
RECALL_ID_PREFIX = "contextfold-recall-"  # SPEC L5: the automatic recall block


# --------------------------------------------------------------------------- to contextfold


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [content] if content else []
    return list(content or [])


def _content_parts(content: Any) -> list[Part]:
    """Text, reasoning and file blocks of a LangChain `content` as parts (metadata only for
    files: the store keeps no bytes)."""
    parts: list[Part] = []
    for block in _blocks(content):
        if isinstance(block, str):
            parts.append(TextPart(text=block))
            continue
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(TextPart(text=str(block.get("text", ""))))
        elif kind in ("reasoning", "thinking"):
            text = block.get("reasoning") or block.get("thinking") or ""
            parts.append(ReasoningPart(text=str(text), signature=block.get("signature")))
        elif kind in ("image", "image_url", "file", "audio", "video"):
            media = block.get("mime_type") or block.get("media_type") or (
                "image/*" if kind.startswith("image") else "application/octet-stream")
            name = block.get("filename") or block.get("id") or kind
            parts.append(FilePart(name=str(name), media_type=str(media)))
        # Provider-specific blocks (tool_use echoed in content, citations, ...) are carried
        # by `tool_calls` or have no durable meaning: left out of the stored text.
    return parts


def usage_of(message: AIMessage) -> Usage | None:
    """`usage_metadata` as contextfold `Usage` (SPEC E1: what this request occupied).

    LangChain's `input_tokens` already includes cache reads and writes, the core's `input`
    does not, so they are taken out once.
    """
    meta = message.usage_metadata
    if not meta:
        return None
    return usage_cache_inside(dict(meta), _USAGE, _model_name(message))


_USAGE = {"prompt": "input_tokens", "output": "output_tokens",
          "cache_read": "input_token_details.cache_read",
          "cache_write": "input_token_details.cache_creation"}


def _model_name(message: BaseMessage) -> str | None:
    meta = message.response_metadata or {}
    name = meta.get("model_name") or meta.get("model")
    return str(name) if name else None


def to_message(message: BaseMessage) -> Message:
    """One LangChain message as the durable `Message` (raises `TypeError` on a kind the
    store cannot represent, e.g. `RemoveMessage`)."""
    if isinstance(message, ToolMessage):
        status = getattr(message, "status", "success")
        result = ToolResultPart(call_id=message.tool_call_id or "unknown",
                                name=message.name, output=message.text,
                                is_error=status == "error")
        extras = [p for p in _content_parts(message.content) if isinstance(p, FilePart)]
        return Message(role="tool", parts=(result, *extras))
    if isinstance(message, AIMessage):
        parts = _content_parts(message.content)
        parts += [ToolCallPart(id=c.get("id") or f"call-{i}", name=c["name"],
                               input=tool_arguments(c.get("args")))
                  for i, c in enumerate(message.tool_calls)]
        # A call the provider sent malformed stays visible as text, never as a bare call.
        parts += [TextPart(text=f"[invalid tool call {c.get('name')}: {c.get('error')}]")
                  for c in message.invalid_tool_calls]
        return Message(role="assistant", parts=tuple(parts), usage=usage_of(message),
                       model=_model_name(message))
    role = _ROLES.get(message.type)
    if role is None:
        raise TypeError(f"contextfold cannot store a LangChain {type(message).__name__} "
                        f"(type {message.type!r})")
    return Message(role=role, parts=tuple(_content_parts(message.content)))


_ROLES: dict[str, Role] = {"human": "user", "system": "system", "chat": "user",
                           "developer": "system"}


class Converted:
    """`to_message` remembered per message object, for lists that grow by appending.

    A LangGraph agent hands the whole list to every model call, mostly the same objects; a
    conversion is reused only for the same object whose cheap fingerprint (type, content
    hash, tool-call ids, status) is unchanged, so a message edited in place is converted
    again. Entries of messages no longer alive are dropped as the cache grows.
    """

    def __init__(self) -> None:
        self._memo: dict[int, tuple[weakref.ref[BaseMessage], tuple[Any, ...], Message]] = {}

    def __call__(self, messages: Sequence[BaseMessage]) -> list[Message]:
        out = []
        for m in messages:
            mark = _fingerprint(m)
            hit = self._memo.get(id(m))
            if hit is not None and hit[0]() is m and hit[1] == mark:
                out.append(hit[2])
                continue
            msg = to_message(m)
            self._memo[id(m)] = (weakref.ref(m), mark, msg)
            out.append(msg)
        if len(self._memo) > 2 * len(messages) + 64:
            self._memo = {k: v for k, v in self._memo.items() if v[0]() is not None}
        return out


def _fingerprint(m: BaseMessage) -> tuple[Any, ...]:
    content = m.content
    body = hash(content) if isinstance(content, str) else (len(content), repr(content[-1:]))
    # Only attributes the type has: a missing one costs pydantic an exception.
    if isinstance(m, AIMessage):
        extra: tuple[Any, ...] = (tuple((c.get("id"), c.get("name")) for c in m.tool_calls),
                                  repr(m.usage_metadata))
    elif isinstance(m, ToolMessage):
        extra = (m.tool_call_id, m.status)
    else:
        extra = ()
    return (type(m), body, *extra)


# --------------------------------------------------------------------------- back to LangChain


def from_message(message: Message, like: BaseMessage | None = None) -> BaseMessage:
    """A LangChain message for `message`; `like` (the application's original) lends its id,
    name and metadata, so only the content the projection changed differs."""
    text = "\n".join(p.text for p in message.parts if isinstance(p, TextPart))
    if message.role == "tool":
        result = message.tool_results[0]
        body = result.output or "(no output)"
        if isinstance(like, ToolMessage):
            return like.model_copy(update={"content": body})
        return ToolMessage(content=body, tool_call_id=result.call_id, name=result.name,
                           status="error" if result.is_error else "success")
    if message.role == "assistant":
        calls = [{"id": c.id, "name": c.name, "type": "tool_call",
                  "args": c.input if isinstance(c.input, dict) else {"input": c.input}}
                 for c in message.tool_calls]
        if isinstance(like, AIMessage):
            return like.model_copy(update={"content": text, "tool_calls": calls})
        return AIMessage(content=text, tool_calls=calls)
    if message.role == "system":
        return SystemMessage(content=text, id=like.id if like else None)
    return HumanMessage(content=text, id=like.id if like else None)


def settle(messages: list[BaseMessage]) -> tuple[list[BaseMessage], list[str]]:
    """Pair tool calls with results as providers require; report every repair.

    System messages stay where they are. Parallel calls a model split over consecutive AI
    messages (LangChain #38352's "mixed" runs) are merged into one AI message when the tool
    run after them answers an earlier one's calls, as the Messages API merges them. A tool
    result is kept only in the run of tool messages right after the AI message that made
    its call; a call with no result in that run is removed from the AI message (an AI
    message left empty goes); the first non-system message is a user message.
    """
    repairs: list[str] = []
    out: list[BaseMessage] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        if isinstance(m, ToolMessage):
            repairs.append(f"dropped tool result {m.tool_call_id} without its call")
            i += 1
            continue
        if isinstance(m, AIMessage) and not m.tool_calls and not m.text.strip():
            repairs.append("dropped an empty AI message")
            i += 1
            continue
        if not isinstance(m, AIMessage) or not m.tool_calls:
            out.append(m)
            i += 1
            continue
        m, i = _merge_split_calls(messages, i, repairs)
        j = i + 1
        run: list[ToolMessage] = []
        while j < len(messages) and isinstance(messages[j], ToolMessage):
            run.append(messages[j])  # type: ignore[arg-type]
            j += 1
        issued = [c.get("id") for c in m.tool_calls]
        answered = {t.tool_call_id for t in run}
        kept_calls = [c for c in m.tool_calls if c.get("id") in answered]
        for c in m.tool_calls:
            if c.get("id") not in answered:
                repairs.append(f"dropped tool call {c.get('id')} without a result")
        if len(kept_calls) != len(m.tool_calls):
            m = m.model_copy(update={"tool_calls": kept_calls,
                                     "content": _without_tool_use(m.content, answered)})
        if m.tool_calls or m.text.strip():
            out.append(m)
        seen: set[str] = set()
        for t in run:
            if t.tool_call_id in issued and t.tool_call_id in {c.get("id") for c in kept_calls} \
                    and t.tool_call_id not in seen:
                out.append(t)
                seen.add(t.tool_call_id)
            else:
                repairs.append(f"dropped tool result {t.tool_call_id} without its call")
        i = j
    first = next((k for k, m in enumerate(out) if not isinstance(m, SystemMessage)), None)
    if first is not None and not isinstance(out[first], HumanMessage):
        out.insert(first, HumanMessage(content=CONTINUATION_PLACEHOLDER))
        repairs.append("added a user message at the start")
    return out, repairs


def _merge_split_calls(messages: list[BaseMessage], i: int,
                       repairs: list[str]) -> tuple[AIMessage, int]:
    """The AI message at `i`, merged with the AI messages right after it when the tool run
    that follows them answers calls of more than the last one; and the index of the last
    message merged."""
    k = i
    while k + 1 < len(messages) and isinstance(messages[k + 1], AIMessage):
        k += 1
    first = messages[i]
    assert isinstance(first, AIMessage)
    if k == i:
        return first, i
    group = [m for m in messages[i:k + 1] if isinstance(m, AIMessage)]
    answered = set()
    j = k + 1
    while j < len(messages) and isinstance(messages[j], ToolMessage):
        answered.add(messages[j].tool_call_id)  # type: ignore[attr-defined]
        j += 1
    if not any(c.get("id") in answered for m in group[:-1] for c in m.tool_calls):
        return first, i
    text = "\n\n".join(m.text for m in group if m.text.strip())
    calls = [c for m in group for c in m.tool_calls]
    repairs.append(f"merged {len(group)} AI messages whose tool calls share one result run")
    return first.model_copy(update={"content": text, "tool_calls": calls}), k


def _without_tool_use(content: Any, answered: set[str]) -> Any:
    """Content blocks without `tool_use` blocks of dropped calls (Anthropic echoes calls in
    content; an unanswered one there is as invalid as in `tool_calls`)."""
    if isinstance(content, str):
        return content
    return [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_use"
                                       and b.get("id") not in answered)]


# --------------------------------------------------------------------------- wire view


def as_openai(messages: Sequence[BaseMessage], system: str | None = None) -> list[dict[str, Any]]:
    """LangChain messages as chat-completions messages, one for one, with no repair: what a
    provider would receive, for the validity oracles (`core.render.validity`)."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for m in messages:
        if isinstance(m, SystemMessage):
            out.append({"role": "system", "content": m.text})
        elif isinstance(m, ToolMessage):
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.text})
        elif isinstance(m, AIMessage):
            msg: dict[str, Any] = {"role": "assistant", "content": m.text or None}
            if m.tool_calls:
                msg["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
                    for c in m.tool_calls]
            out.append(msg)
        else:
            out.append({"role": "user", "content": m.text})
    return out
