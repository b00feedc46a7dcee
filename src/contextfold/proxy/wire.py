"""The two wire protocols the proxy speaks: a client request in contextfold terms, the body
forwarded upstream, the reply read back (plain or streamed) and the context-length error.

`parse` turns the client's JSON into the mirror's inputs (system text, tool JSON, one
`Message` per wire message); `build` turns the mirror's answer back into the client's own
protocol, forwarding every kept message as the exact JSON the client sent (SPEC Y2, Y4).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.messages import Message, TextPart, ToolCallPart, ToolResultPart, Usage
from ..formats.builder import ANTHROPIC_USAGE, OPENAI_USAGE, usage_from
from ..formats.parts import anthropic_parts, nonempty, openai_parts, tool_input
from ..runtime.errors import RequestTooLargeError
from ..runtime.mirror import Synced

Protocol = Literal["openai", "anthropic"]
MAX_BREAKPOINTS = 4  # Anthropic accepts at most four cache_control blocks per request


class WireError(ValueError):
    """The client's request is not one the protocol accepts (answered with a 400)."""


@dataclass
class Parsed:
    """A client request as the mirror reads it."""

    protocol: Protocol
    model: str
    system: str | None
    tools: list[dict[str, Any]]
    messages: list[Message]
    offset: int = 0  # wire index of messages[0] (OpenAI: leading system messages skipped)
    stream: bool = False


def _ignore(_what: str) -> None:
    """Unknown blocks are forwarded as sent; the mirror just does not see them."""


def _system_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n\n".join(str(b.get("text") or "") for b in value if isinstance(b, dict))
    return ""


def parse(protocol: Protocol, body: Any) -> Parsed:
    """The mirror's view of a chat completions / Messages request body."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) \
            or not body["messages"]:
        raise WireError("messages: at least one message is required")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise WireError("model: a model name is required")
    try:
        if protocol == "openai":
            return _parse_openai(body, model)
        return _parse_anthropic(body, model)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise WireError(f"messages: {exc}") from exc


def _parse_openai(body: dict[str, Any], model: str) -> Parsed:
    wire = body["messages"]
    offset = 0
    systems: list[str] = []
    while offset < len(wire) and wire[offset].get("role") in ("system", "developer"):
        systems.append(_system_of(wire[offset].get("content")))
        offset += 1
    names: dict[str, str] = {}
    msgs: list[Message] = []
    for m in wire[offset:]:
        role = m.get("role")
        if role in ("user", "system", "developer"):
            msgs.append(Message(role="user" if role == "user" else "system",
                                parts=tuple(openai_parts(m.get("content"), _ignore))))
        elif role == "assistant":
            parts: list[Any] = list(openai_parts(m.get("content"), _ignore))
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                names[call["id"]] = fn["name"]
                parts.append(ToolCallPart(id=call["id"], name=fn["name"],
                                          input=tool_input(fn.get("arguments"))))
            msgs.append(Message(role="assistant", parts=tuple(parts)))
        elif role == "tool":
            call_id = m["tool_call_id"]
            text = "\n".join(p.text for p in openai_parts(m.get("content"), _ignore)
                             if isinstance(p, TextPart))
            msgs.append(Message(role="tool", parts=(ToolResultPart(
                call_id=call_id, name=names.get(call_id), output=text),)))
        else:
            raise ValueError(f"unknown role {role!r}")
    tools = [t.get("function", t) for t in body.get("tools") or [] if isinstance(t, dict)]
    return Parsed("openai", model, "\n\n".join(systems) or None, tools, msgs, offset,
                  bool(body.get("stream")))


def _parse_anthropic(body: dict[str, Any], model: str) -> Parsed:
    names: dict[str, str] = {}
    msgs: list[Message] = []
    for m in body["messages"]:
        role = m.get("role")
        if role == "system":  # Claude Code sends these inside `messages`
            msgs.append(Message(role="system", parts=(TextPart(text=_system_of(
                m.get("content"))),)))
            continue
        if role not in ("user", "assistant"):
            raise ValueError(f"unknown role {role!r}")
        converted = anthropic_parts(m.get("content"), _ignore, names)
        out_role = "assistant" if role == "assistant" else (
            "tool" if converted.has_results else "user")
        msgs.append(Message(role=out_role, parts=tuple(converted.parts)))
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    return Parsed("anthropic", model, _system_of(body.get("system")) or None, tools, msgs, 0,
                  bool(body.get("stream")))


# --------------------------------------------------------------------------- forwarding


def build(parsed: Parsed, body: dict[str, Any], synced: Synced) -> dict[str, Any]:
    """The body to forward: the client's own fields, the projected messages, max tokens
    clamped so prompt + reply fit the window (SPEC B1)."""
    out = dict(body)
    wire = body["messages"]
    items = synced.items()
    messages: list[Any] = list(wire[:parsed.offset])
    anthropic = parsed.protocol == "anthropic"
    breakpoints = _count_breakpoints(body) if anthropic else 0
    skip = False
    for n, item in enumerate(items):
        if skip:
            skip = False
            continue
        if item.index is None:
            block: dict[str, Any] = {"type": "text", "text": synced.prefix_text or ""}
            if anthropic and breakpoints < MAX_BREAKPOINTS:
                block["cache_control"] = {"type": "ephemeral"}  # SPEC Y4: stable prefix
                breakpoints += 1
            nxt = items[n + 1] if n + 1 < len(items) else None
            first = wire[parsed.offset + nxt.index] if nxt is not None and \
                nxt.index is not None and nxt.verbatim else None
            if anthropic and first is not None and nxt is not None and \
                    nxt.message.role == "user" and first.get("role") == "user":
                # Roles alternate in Messages: the summary joins the first kept user turn.
                merged = copy.deepcopy(first)
                merged["content"] = [block, *_blocks(merged.get("content"))]
                messages.append(merged)
                skip = True
                continue
            messages.append({"role": "user", "content": [block] if anthropic else block["text"]})
        elif item.verbatim:
            messages.append(wire[parsed.offset + item.index])
        else:
            messages.append(_render(parsed.protocol, item.message))
    out["messages"] = messages
    window = synced.budget.context_window
    room = max(1, window - synced.estimate.tokens)
    for key in ("max_tokens", "max_completion_tokens"):
        if isinstance(out.get(key), int) and out[key] > room:
            out[key] = room
    if parsed.protocol == "openai" and parsed.stream:
        opts = dict(out.get("stream_options") or {})
        opts.setdefault("include_usage", True)  # usage is what E1 records
        out["stream_options"] = opts
    return out


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    return list(content or [])


def _count_breakpoints(body: dict[str, Any]) -> int:
    text = json.dumps([body.get("system"), body.get("tools"), body.get("messages")])
    return text.count('"cache_control"')


def _render(protocol: Protocol, msg: Message) -> dict[str, Any]:
    """A message the projection changed (a masked or clipped tool result, SPEC V1/K6)."""
    results = [p for p in msg.parts if isinstance(p, ToolResultPart)]
    text = "\n".join(p.text for p in msg.parts if isinstance(p, TextPart))
    if protocol == "openai":
        if results:
            return {"role": "tool", "tool_call_id": results[0].call_id,
                    "content": results[0].output}
        return {"role": msg.role if msg.role != "tool" else "user", "content": text}
    if results:
        return {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": r.call_id, "content": r.output,
             **({"is_error": True} if r.is_error else {})} for r in results]}
    return {"role": "assistant" if msg.role == "assistant" else "user",
            "content": [{"type": "text", "text": text or "(empty)"}]}


# --------------------------------------------------------------------------- replies


def reply_of(protocol: Protocol, data: dict[str, Any], model: str) -> Message | None:
    """The assistant message of a non-streamed answer, with its usage (SPEC E1)."""
    if protocol == "openai":
        choices = data.get("choices") or []
        if not choices:
            return None
        m = choices[0].get("message") or {}
        parsed = _parse_openai({"messages": [m]}, model).messages[0]
        usage = usage_from(data.get("usage"), OPENAI_USAGE, data.get("model") or model)
        return parsed.model_copy(update={"usage": usage, "model": data.get("model") or model})
    converted = anthropic_parts(data.get("content") or [], _ignore, {})
    usage = usage_from(data.get("usage"), ANTHROPIC_USAGE, data.get("model") or model)
    return Message(role="assistant", parts=tuple(converted.parts), usage=usage,
                   model=data.get("model") or model)


@dataclass
class StreamReader:
    """Reads a server-sent event stream as it passes through, and rebuilds the reply."""

    protocol: Protocol
    model: str
    buffer: bytes = b""
    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    done: bool = False

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                continue
            try:
                event = json.loads(payload)
            except ValueError:
                continue
            if isinstance(event, dict):
                self._event(event)

    def _event(self, ev: dict[str, Any]) -> None:
        if self.protocol == "openai":
            if isinstance(ev.get("usage"), dict):
                self.usage = ev["usage"]
            for choice in ev.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    self.text.append(delta["content"])
                for call in delta.get("tool_calls") or []:
                    slot = self.calls.setdefault(call.get("index", 0),
                                                 {"id": None, "name": "", "args": ""})
                    slot["id"] = call.get("id") or slot["id"]
                    fn = call.get("function") or {}
                    slot["name"] += fn.get("name") or ""
                    slot["args"] += fn.get("arguments") or ""
            return
        kind = ev.get("type")
        if kind == "message_start":
            self.usage.update((ev.get("message") or {}).get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[ev.get("index", 0)] = dict(ev.get("content_block") or {}, _json="")
        elif kind == "content_block_delta":
            block = self.blocks.setdefault(ev.get("index", 0), {"type": "text", "_json": ""})
            delta = ev.get("delta") or {}
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                block["_json"] += delta.get("partial_json", "")
            elif delta.get("type") == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
        elif kind == "message_delta":
            self.usage.update({k: v for k, v in (ev.get("usage") or {}).items()
                               if v is not None})
        elif kind == "message_stop":
            self.done = True

    def reply(self) -> Message | None:
        """The streamed reply (None when the stream did not finish)."""
        if not self.done and not self.usage:
            return None
        if self.protocol == "openai":
            m: dict[str, Any] = {"role": "assistant", "content": "".join(self.text)}
            calls = [c for _, c in sorted(self.calls.items()) if c["id"] and c["name"]]
            if calls:
                m["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                    "name": c["name"], "arguments": c["args"] or "{}"}} for c in calls]
            return reply_of("openai", {"choices": [{"message": m}], "usage": self.usage or None},
                            self.model)
        content = []
        for _, block in sorted(self.blocks.items()):
            raw = block.pop("_json", "")
            if block.get("type") == "tool_use" and raw:
                block["input"] = tool_input(raw)
            content.append(block)
        return reply_of("anthropic", {"content": content, "usage": self.usage or None},
                        self.model)


# --------------------------------------------------------------------------- errors


def too_large(protocol: Protocol, err: RequestTooLargeError) -> tuple[int, dict[str, Any]]:
    """The protocol's own context-length error for a request that cannot fit (SPEC Y3)."""
    if protocol == "openai":
        return 400, {"error": {
            "message": f"This model's maximum context length is {err.safe_input_limit} "
                       f"tokens. However, your messages resulted in {err.estimated_tokens} "
                       f"tokens. Please reduce the length of the messages. (contextfold "
                       f"proxy: {err})",
            "type": "invalid_request_error", "param": "messages",
            "code": "context_length_exceeded"}}
    return 400, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": f"prompt is too long: {err.estimated_tokens} tokens > "
                   f"{err.safe_input_limit} maximum (contextfold proxy: {err})"}}


def bad_request(protocol: Protocol, message: str) -> dict[str, Any]:
    """The protocol's invalid-request error body."""
    if protocol == "openai":
        return {"error": {"message": message, "type": "invalid_request_error",
                          "param": None, "code": None}}
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def usage_tokens(usage: Usage | None) -> int | None:
    return None if usage is None else usage.prompt


__all__ = ["Parsed", "Protocol", "StreamReader", "WireError", "bad_request", "build", "nonempty",
           "parse", "reply_of", "too_large"]
