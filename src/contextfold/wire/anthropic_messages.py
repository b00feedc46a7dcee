"""The Anthropic Messages API on the wire, read and written in one place.

Reading: content blocks (`read_content`: text, thinking, tool use and results, images and
documents), a wire message (`read_message`), a whole response (`read_reply`), a stream of
events (`StreamAssembler`), the usage (`usage_of`). Writing: the request messages are
`core.render.export.to_anthropic` (one message alone: `render_message`), the body `request_body`.
The errors a proxy answers in this protocol's own shape: `context_length_error`,
`invalid_request_error`. Claude Code transcripts hold the same blocks (formats/claude_code.py).

Usage (SPEC E1, E3) maps one to one: `input_tokens` are the prompt tokens read neither from
nor into the cache, `cache_read_input_tokens` and `cache_creation_input_tokens` the others,
`output_tokens` the reply; their sum is what the request occupied, each token once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.render.export import render_anthropic, to_anthropic
from ..core.values.messages import (
    Message,
    ProviderCompactionPart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from .parts import file_part, ignore, nonempty, system_text, text_of, tool_arguments
from .plain import plain
from .reply import MalformedReply, Reply, ReplyStatus, StopReason
from .usage import usage_from

if TYPE_CHECKING:  # names only annotations use
    from ..core.values.messages import FilePart, Part
    from ..core.view.projection import Projection
    from .parts import ToolDefinition, Unknown

__all__ = ["Converted", "StreamAssembler", "context_length_error", "invalid_request_error",
           "read_content", "read_message", "read_reply", "read_tools", "render_message",
           "request_body", "stop_reason_of", "to_anthropic", "usage_of"]

_STOP: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    "pause_turn": "pause_turn",
}
# Our usage field -> the protocol's.
USAGE_FIELDS = {"input": "input_tokens", "output": "output_tokens",
                "cache_read": "cache_read_input_tokens",
                "cache_write": "cache_creation_input_tokens"}
CONTEXT_LENGTH_STATUS = 400


# --------------------------------------------------------------------------- usage


def usage_of(raw: Any, model: str | None) -> Usage | None:
    """`core.Usage` from a Messages API usage object (None when it reports nothing or a field
    is not a token count). An on-demand compaction's answer (SPEC Y7) reports zero at the
    top, its one summarising call in `usage.iterations`: that call is the usage (what it
    read and wrote, billed like any request); several iterations are never added up (E3)."""
    data = plain(raw)
    usage = usage_from(data, USAGE_FIELDS, model)
    iterations = data.get("iterations") if isinstance(data, dict) else None
    if (usage is None or usage.occupied == 0) and isinstance(iterations, list) and \
            len(iterations) == 1:
        return usage_from(iterations[0], USAGE_FIELDS, model) or usage
    return usage


def stop_reason_of(stop: str | None) -> StopReason:
    """The common stop reason of a `stop_reason`."""
    return _STOP.get(stop or "", "other")


# --------------------------------------------------------------------------- reading blocks


@dataclass
class Converted:
    """The parts of one converted message."""

    parts: list[Part] = field(default_factory=list)

    @property
    def has_results(self) -> bool:
        return any(isinstance(p, ToolResultPart) for p in self.parts)


def source_part(block: dict[str, Any], index: int, kind: str) -> FilePart:
    """An image or document block as a file reference (its `source` names the bytes)."""
    source = block.get("source")
    source = source if isinstance(source, dict) else {}
    return file_part(source.get("media_type"), index=index, kind=kind,
                     data=source.get("data"), url=source.get("url"),
                     name=block.get("title"))


def _result_output(content: Any, parts: list[Part], on_unknown: Unknown) -> str:
    """Text of a tool_result's content; images inside it become file parts of the message."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        on_unknown("tool_result content that is not text or a list")
        return json.dumps(content, ensure_ascii=False)
    texts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            on_unknown("tool_result content item that is not an object")
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind in ("image", "document"):
            parts.append(source_part(block, len(parts) + 1,
                                     "image" if kind == "image" else "application"))
        else:
            on_unknown(f"tool_result block {kind!r}")
    return "\n".join(texts)


def read_content(content: Any, on_unknown: Unknown = ignore,
                 call_names: dict[str, str] | None = None) -> Converted:
    """Anthropic content (a string or a list of blocks) as parts.

    `call_names` maps tool call ids to tool names; calls found here are added to it and
    results get their tool's name from it. Files of tool results follow the results.
    """
    names = call_names if call_names is not None else {}
    out = Converted()
    if isinstance(content, str):
        if content:
            out.parts.append(TextPart(text=content))
        return out
    if not isinstance(content, list):
        on_unknown("content that is neither text nor a list of blocks")
        return out
    extras: list[Part] = []  # files of tool results, placed after the results
    for block in content:
        if not isinstance(block, dict):
            on_unknown("content block that is not an object")
            continue
        kind = block.get("type")
        if kind == "text":
            text = nonempty(block.get("text"))
            if text is not None:
                out.parts.append(TextPart(text=text))
        elif kind == "thinking":
            out.parts.append(ReasoningPart(text=block.get("thinking") or "",
                                           signature=nonempty(block.get("signature"))))
        elif kind == "redacted_thinking":
            out.parts.append(ReasoningPart(text="", signature=nonempty(block.get("data"))))
        elif kind == "tool_use" and nonempty(block.get("id")) and nonempty(block.get("name")):
            names[block["id"]] = block["name"]
            out.parts.append(ToolCallPart(id=block["id"], name=block["name"],
                                          input=tool_arguments(block.get("input"))))
        elif kind == "tool_result" and nonempty(block.get("tool_use_id")):
            call_id = block["tool_use_id"]
            output = _result_output(block.get("content"), extras, on_unknown)
            out.parts.append(ToolResultPart(call_id=call_id, name=names.get(call_id),
                                            output=output,
                                            is_error=block.get("is_error") is True))
        elif kind in ("image", "document"):
            out.parts.append(source_part(block, len(out.parts) + 1,
                                         "image" if kind == "image" else "application"))
        elif kind == "compaction":
            # SPEC Y7: server-side compaction (`compact_20260112`), kept exactly as sent; a
            # cache breakpoint on it is the request's, not the block's.
            out.parts.append(ProviderCompactionPart(provider="anthropic", data={
                k: v for k, v in block.items() if k != "cache_control"}))
        else:
            on_unknown(f"content block {kind!r}")
    out.parts.extend(extras)
    return out


def read_message(m: dict[str, Any], *, call_names: dict[str, str] | None = None,
                 on_unknown: Unknown = ignore) -> Message:
    """A Messages API message as a core `Message`; it may have no parts.

    A user message holding `tool_result` blocks is a `tool` message (its text and files stay
    in it, after the results). A `system` entry inside `messages` (Claude Code sends them) is a
    system message. Another role raises ValueError.
    """
    role = m.get("role")
    if role == "system":
        text = system_text(m.get("content"))
        return Message(role="system", parts=(TextPart(text=text),) if text else ())
    if role not in ("user", "assistant"):
        raise ValueError(f"role {role!r} is not 'user' or 'assistant'")
    converted = read_content(m.get("content"), on_unknown, call_names)
    if role == "assistant":
        if "model" not in m and "usage" not in m:  # a request's message (the proxy's hot path)
            return Message(role="assistant", parts=tuple(converted.parts))
        model = text_of(m.get("model"))  # recorded messages carry these
        return Message(role="assistant", parts=tuple(converted.parts),
                       usage=usage_of(m.get("usage"), model), model=model)
    return Message(role="tool" if converted.has_results else "user",
                   parts=tuple(converted.parts))


def read_tools(tools: Any) -> list[dict[str, Any]]:
    """A request's tool definitions (name, description, input_schema); entries that are not
    objects are left out."""
    return [t for t in tools or [] if isinstance(t, dict)]


# --------------------------------------------------------------------------- writing


def render_message(msg: Message) -> list[dict[str, Any]]:
    """One message as `to_anthropic` writes it (see `core.render.export.render_anthropic`)."""
    return render_anthropic(msg)


def tool_definitions(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    """Tools as a request's `tools`."""
    return [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in tools]


def request_body(projection: Projection, system: str | None, *, model: str, max_tokens: int,
                 tools: Sequence[ToolDefinition] = (),
                 temperature: float | None = None,
                 cache: bool = True) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The request body for `projection` (the system prompt beside the messages, as the API
    wants), and the repairs the export made. Raises ValueError when there is nothing to send.

    `cache`: mark the prompt's stable parts for Anthropic's prompt cache (SPEC Q3, see
    `mark_cache_breakpoints`); False sends no `cache_control` at all.
    """
    export = to_anthropic(projection, system)
    if not export.messages:
        raise ValueError("the request has no messages to send: add a pending message")
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens,
                            "messages": export.messages}
    if export.system:
        body["system"] = export.system
    if tools:
        body["tools"] = tool_definitions(tools)
    if temperature is not None:
        body["temperature"] = temperature
    if cache:
        mark_cache_breakpoints(body, checkpoint=projection.checkpoint is not None)
    return body, export.repairs


EPHEMERAL = {"type": "ephemeral"}
# Blocks a `cache_control` mark may sit on (thinking blocks take none).
_CACHEABLE = ("text", "tool_result", "tool_use", "image", "document")


def mark_cache_breakpoints(body: dict[str, Any], *, checkpoint: bool) -> int:
    """Put Anthropic `cache_control` marks where the prompt is stable (SPEC Q3), at most
    three of the four the API takes: the system prompt (it caches the tools before it too),
    the checkpoint summary that opens the messages after a compaction (byte-stable until the
    next one, Y4), and the last block of the request, so the next turn reads everything up to
    here back from the cache and pays only for what it adds. Returns the marks placed."""
    marks = 0
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": dict(EPHEMERAL)}]
        marks += 1
    messages = body.get("messages") or []
    if checkpoint and messages and _mark(messages[0], first=True):
        marks += 1
    if messages and _mark(messages[-1], first=False):
        marks += 1
    return marks


def _mark(message: dict[str, Any], *, first: bool) -> bool:
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return False
        message["content"] = content = [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        return False
    blocks = content if first else list(reversed(content))
    for block in blocks:
        if isinstance(block, dict) and block.get("type") in _CACHEABLE and \
                (block.get("type") != "text" or block.get("text")):
            if "cache_control" not in block:
                block["cache_control"] = dict(EPHEMERAL)
                return True
            return False
        if first:
            return False  # the summary is the first block, or there is none to mark
    return False


# --------------------------------------------------------------------------- replies


def read_reply(body: Any, fallback_model: str, status: ReplyStatus = "complete") -> Reply:
    """A Messages API response (its JSON or the SDK's object) with its usage and model
    (`fallback_model` when it names none). Raises `MalformedReply` for anything but an
    assistant message."""
    data = plain(body)
    if not isinstance(data, dict) or data.get("type", "message") != "message" \
            or data.get("role") != "assistant":
        raise MalformedReply("did not return an assistant message")
    model = nonempty(data.get("model")) or fallback_model
    parts = read_content(data.get("content") or [], ignore, {}).parts
    stop = text_of(data.get("stop_reason"))
    message = Message(role="assistant", parts=tuple(parts),
                      usage=usage_of(data.get("usage"), model), status=status, model=model)
    return Reply(message, stop_reason_of(stop), stop, text_of(data.get("id")))


# The field of a content block each kind of delta extends.
_DELTA_FIELDS = {"text_delta": ("text", "text"), "thinking_delta": ("thinking", "thinking"),
                 "input_json_delta": ("partial_json", "input"),
                 "signature_delta": ("signature", "signature")}


class StreamAssembler:
    """What has arrived of one streamed message, event by event (JSON or SDK events).

    Each block is kept as `content_block_start` sent it, its deltas collected beside it;
    `reply` joins them into the blocks of a whole message and reads that with `read_reply`,
    so a streamed reply is read by the same rules as a whole one.
    """

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._deltas: dict[int, dict[str, list[str]]] = {}
        self._usage: dict[str, Any] = {}
        self.stop: str | None = None
        self.finished = False  # message_stop arrived
        self.model: str | None = None
        self.request_id: str | None = None

    def _take_usage(self, usage: Any) -> None:
        # message_start carries the prompt side, message_delta the (cumulative) output and,
        # on newer API versions, the prompt side again: a later non-zero value wins.
        if not isinstance(usage, dict):
            return
        if isinstance(usage.get("iterations"), list):  # SPEC Y7: an on-demand compaction
            self._usage["iterations"] = usage["iterations"]
        for name in USAGE_FIELDS.values():
            value = usage.get(name)
            if value is not None and (value != 0 or name not in self._usage):
                self._usage[name] = value

    def add(self, event: Any) -> str:
        """Fold one event in; return its text delta (may be empty)."""
        ev = plain(event)
        kind = ev.get("type") if isinstance(ev, dict) else None
        if kind == "content_block_delta":
            return self._delta(ev)
        if kind == "message_start":
            message = ev.get("message") if isinstance(ev.get("message"), dict) else {}
            self.model = nonempty(message.get("model")) or self.model
            self.request_id = nonempty(message.get("id")) or self.request_id
            self._take_usage(message.get("usage"))
        elif kind == "content_block_start":
            block = ev.get("content_block")
            self._blocks[ev.get("index", 0)] = dict(block) if isinstance(block, dict) else {}
        elif kind == "message_delta":
            delta = ev.get("delta") if isinstance(ev.get("delta"), dict) else {}
            self.stop = text_of(delta.get("stop_reason")) or self.stop
            self._take_usage(ev.get("usage"))
        elif kind == "message_stop":
            self.finished = True
        return ""

    def _delta(self, ev: dict[str, Any]) -> str:
        index = ev.get("index", 0)
        self._blocks.setdefault(index, {"type": "text"})
        delta = ev.get("delta") if isinstance(ev.get("delta"), dict) else {}
        if delta.get("type") == "compaction_delta":  # SPEC Y7: the block's fields, whole
            for name in ("content", "encrypted_content"):
                if isinstance(delta.get(name), str):
                    self._deltas.setdefault(index, {}).setdefault(name, []).append(delta[name])
            return ""
        source, target = _DELTA_FIELDS.get(delta.get("type"), (None, None))
        piece = delta.get(source) if source is not None else None
        if target is None or not isinstance(piece, str):
            return ""
        self._deltas.setdefault(index, {}).setdefault(target, []).append(piece)
        return piece if target == "text" else ""

    @property
    def usage_seen(self) -> bool:
        return bool(self._usage)

    def reply(self, fallback_model: str, status: ReplyStatus = "complete") -> Reply:
        """The message so far; status "error" marks a partial one."""
        content: list[dict[str, Any]] = []
        for index, start in sorted(self._blocks.items()):
            block = dict(start)
            for name, pieces in self._deltas.get(index, {}).items():
                joined = "".join(pieces)
                if name == "input":
                    block[name] = joined  # the JSON text of the input: read like a whole one
                elif name == "signature":
                    block[name] = pieces[-1]
                else:
                    block[name] = (text_of(block.get(name)) or "") + joined
            content.append(block)
        return read_reply({"type": "message", "role": "assistant", "id": self.request_id,
                           "model": self.model, "content": content, "stop_reason": self.stop,
                           "usage": self._usage or None}, fallback_model, status)


def render_provider_base(msg: Message, *, cache: bool = False) -> dict[str, Any] | None:
    """A message holding Anthropic's own compaction block (SPEC Y7) as the first message of
    a request: the block exactly as the API returned it, first (the API accepts it nowhere
    else), then the rest of that message as `render_message` writes it; `cache` puts a
    breakpoint on the block (a stable prefix). None when the message holds no such block
    (another provider's compaction is never shown here)."""
    blocks = [dict(p.data) for p in msg.parts
              if isinstance(p, ProviderCompactionPart) and p.provider == "anthropic"]
    if not blocks:
        return None
    if cache:
        blocks[-1]["cache_control"] = {"type": "ephemeral"}
    rest = msg.model_copy(update={"parts": tuple(
        p for p in msg.parts if not isinstance(p, ProviderCompactionPart))})
    for rendered in render_message(rest):
        blocks += [b for b in rendered.get("content") or [] if isinstance(b, dict)]
    return {"role": msg.role if msg.role in ("user", "assistant") else "assistant",
            "content": blocks}


# --------------------------------------------------------------------------- errors


def context_length_error(estimated_tokens: int, limit: int, note: str) -> dict[str, Any]:
    """The body Anthropic answers a prompt over the window with (status
    `CONTEXT_LENGTH_STATUS`), so a client handles it as it handles Anthropic's own."""
    return {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": f"prompt is too long: {estimated_tokens} tokens > {limit} maximum ({note})"}}


def invalid_request_error(message: str) -> dict[str, Any]:
    """The protocol's invalid-request error body."""
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
