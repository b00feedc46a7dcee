"""Responses API input items <-> contextfold messages (no framework import).

The OpenAI Agents SDK keeps a conversation as Responses input items: messages
(`{"role": "user", "content": ...}`, assistant `{"type": "message", ...}`), `function_call`
and `function_call_output` items, `reasoning` items, hosted-tool items. contextfold keeps
`Message`s. The conversions:

* the items one model response produced (reasoning, text, calls) become one assistant
  message, so a call and the text before it stay one reply (K1 never cuts between them);
  every `function_call_output` is a tool message naming its call (and the call's tool name);
* identifiers are kept verbatim: `call_id`s, tool names, the arguments (parsed JSON when
  they are JSON, the string otherwise);
* reasoning is stored (never summarised, SPEC R2) and not replayed: a reasoning item without
  the provider's own id and encrypted content would be refused;
* an item type contextfold has no part for (hosted tools: web search, file search, computer
  use, MCP ...) is stored as assistant text naming the item, so nothing is dropped silently.

`projection_items` renders a projection back as input items; `paired` is the last guard that
no call goes out without its output and no output without its call.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.export import CONTINUATION_PLACEHOLDER
from ..core.messages import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from ..core.projection import Projection
from ..core.projection import prefix_text as projection_prefix
from ..wire.parts import tool_arguments

Item = dict[str, Any]

_TEXT_TYPES = {"input_text", "output_text", "text", "summary_text", "reasoning_text"}


def content_text(content: Any) -> str:
    """The text of a message `content` (a string or a list of content parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out: list[str] = []
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, Mapping):
            kind = part.get("type")
            if kind in _TEXT_TYPES:
                out.append(str(part.get("text") or ""))
            elif kind == "refusal":
                out.append(str(part.get("refusal") or ""))
            elif kind in ("input_image", "input_file", "input_audio"):
                name = part.get("filename") or part.get("file_id") or kind.removeprefix("input_")
                out.append(f"[{kind.removeprefix('input_')}: {name}]")
    return "\n".join(t for t in out if t)


def _dump(item: Mapping[str, Any]) -> Item:
    """A pydantic item (the SDK hands out both dicts and models) as a plain dict."""
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if dump is None:
        raise TypeError(f"not a Responses input item: {type(item).__name__}")
    return dump(exclude_unset=True, mode="json")


def items_to_messages(items: Iterable[Mapping[str, Any]], *,
                      call_names: Mapping[str, str] | None = None,
                      usage: Usage | None = None) -> list[Message]:
    """Input items as contextfold messages (see the module docstring).

    `call_names`: tool names of calls stored earlier (a `function_call_output` carries only
    the call id). `usage` goes on the last assistant message produced (SPEC E1).
    """
    names = dict(call_names or {})
    out: list[Message] = []
    reply: list[Part] = []

    def flush() -> None:
        if reply:
            out.append(Message(role="assistant", parts=tuple(reply)))
            reply.clear()

    for raw in items:
        item = _dump(raw)
        kind = item.get("type")
        role = item.get("role")
        if kind in (None, "message") and role in ("user", "system", "developer"):
            flush()
            out.append(Message(role="user" if role == "user" else "system",
                               parts=_user_parts(item.get("content"))))
        elif kind in (None, "message") and role == "assistant":
            if any(isinstance(p, ToolCallPart) for p in reply):
                flush()  # text after a call starts the next reply
            text = content_text(item.get("content"))
            if text:
                reply.append(TextPart(text=text))
        elif kind == "function_call":
            names[str(item["call_id"])] = str(item["name"])
            reply.append(ToolCallPart(id=str(item["call_id"]), name=str(item["name"]),
                                      input=tool_arguments(item.get("arguments"))))
        elif kind == "reasoning":
            if any(isinstance(p, ToolCallPart | TextPart) for p in reply):
                flush()  # reasoning opens a new response
            text = content_text(item.get("summary")) or content_text(item.get("content"))
            reply.append(ReasoningPart(text=text, signature=item.get("encrypted_content")))
        elif kind == "function_call_output":
            flush()
            call_id = str(item["call_id"])
            out.append(Message(role="tool", parts=(ToolResultPart(
                call_id=call_id, name=names.get(call_id), output=content_text(item.get("output"))
                or "",),)))
        else:  # hosted tools and anything newer: kept as text, never dropped
            flush()
            body = json.dumps({k: v for k, v in item.items() if k != "id"}, ensure_ascii=False,
                              default=str)
            out.append(Message(role="assistant", parts=(TextPart(text=f"[{kind}] {body}"),)))
    flush()
    if usage is not None:
        for i in range(len(out) - 1, -1, -1):
            if out[i].role == "assistant":
                out[i] = out[i].model_copy(update={"usage": usage, "model": usage.model})
                break
    return out


def _user_parts(content: Any) -> tuple[Part, ...]:
    parts: list[Part] = []
    blocks = content if isinstance(content, list) else [content]
    texts: list[str] = []
    for block in blocks:
        if isinstance(block, Mapping) and block.get("type") in ("input_image", "input_file"):
            name = str(block.get("filename") or block.get("file_id") or block.get("image_url")
                       or block["type"])[:200]
            media = "image/*" if block["type"] == "input_image" else "application/octet-stream"
            parts.append(FilePart(name=name, media_type=media))
        else:
            texts.append(content_text(block))
    text = "\n".join(t for t in texts if t)
    return (TextPart(text=text), *parts) if text or not parts else tuple(parts)


def message_items(msg: Message) -> list[Item]:
    """One contextfold message as input items (reasoning is not replayed)."""
    if msg.role == "tool":
        return [{"type": "function_call_output", "call_id": r.call_id,
                 "output": (f"[tool error] {r.output}" if r.is_error else r.output)
                 or "(no output)"} for r in msg.tool_results]
    text = _visible_text(msg)
    if msg.role == "assistant":
        out: list[Item] = [{"role": "assistant", "content": text}] if text else []
        if not msg.is_closed_without_result:  # an aborted reply's calls never got results
            out += [{"type": "function_call", "call_id": c.id, "name": c.name,
                     "arguments": c.input if isinstance(c.input, str)
                     else json.dumps(c.input, ensure_ascii=False)} for c in msg.tool_calls]
        return out
    return [{"role": msg.role, "content": text}] if text else []


def _visible_text(msg: Message) -> str:
    texts = []
    for p in msg.parts:
        if isinstance(p, TextPart) and p.text:
            texts.append(p.text)
        elif isinstance(p, FilePart):
            texts.append(f"[attached file: {p.name} ({p.media_type})]")
    return "\n".join(texts)


def prefix_text(projection: Projection) -> str | None:
    """The checkpoint summary and pins, as one user message's text (None: neither).

    The same text the provider exports send (`core.export`), so every face shows a model
    the same checkpoint."""
    return projection_prefix(projection)


def projection_items(projection: Projection) -> list[Item]:
    """What the model sees (SPEC T3) as input items: the checkpoint and pins as one user
    message, then the kept tail and what followed, as projected (masked, clipped)."""
    out: list[Item] = []
    text = prefix_text(projection)
    if text is not None:
        out.append({"role": "user", "content": text})
    for node in projection.messages:
        # SPEC Q5: a pin note where it happened, and its turn's recall block (L5).
        out += [{"role": "user", "content": text} for text in projection.notes_before(node.id)]
        out += message_items(projection.message_of(node))
    out += [{"role": "user", "content": text} for text in projection.notes_before(None)]
    return out


def paired(items: Sequence[Mapping[str, Any]]) -> tuple[list[Item], int]:
    """`items` with every unpaired call or output left out, and how many were.

    A `function_call_output` must follow its `function_call`; a call must have its output
    (the Responses API refuses either orphan). The projection never splits a pair (K1), so
    this only finds what a caller's own input brought in (an orphaned result in a history
    given to `Runner.run`): it is dropped from what is sent, never from the store.
    """
    calls: set[str] = set()
    answered: set[str] = set()
    keep: list[bool] = []
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            calls.add(str(item.get("call_id")))
            keep.append(True)
        elif kind == "function_call_output":
            cid = str(item.get("call_id"))
            ok = cid in calls and cid not in answered
            answered.add(cid)
            keep.append(ok)
        else:
            keep.append(True)
    out = [dict(item) for item, k in zip(items, keep, strict=True)
           if k and not (item.get("type") == "function_call"
                         and str(item.get("call_id")) not in answered)]
    dropped = len(items) - len(out)
    first = next((i for i in out if i.get("role") not in ("system", "developer")), None)
    if first is not None and first.get("role") != "user":  # the user's side opens a history
        out.insert(out.index(first), {"role": "user", "content": CONTINUATION_PLACEHOLDER})
    return out, dropped


def chat_messages(items: Sequence[Mapping[str, Any]],
                  instructions: str | None = None) -> list[dict[str, Any]]:
    """Input items in chat-completions shape, as the SDK's chat-completions converter sends
    them (calls join the assistant message before them); nothing repaired. The validity
    oracles (`core.validity`) judge this."""
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for raw in items:
        item = _dump(raw)
        kind = item.get("type")
        if kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": content_text(item.get("output"))})
        elif kind == "reasoning":
            continue
        elif item.get("role") is not None:
            role = "system" if item["role"] == "developer" else item["role"]
            out.append({"role": role, "content": content_text(item.get("content"))})
    return out
