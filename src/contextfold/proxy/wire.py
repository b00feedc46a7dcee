"""The proxy's side of the two wire protocols: a client request in the mirror's terms, the
body forwarded upstream, the reply read back (plain or streamed) and the error bodies.

What a protocol's messages, replies, streams, usage and errors are is `contextfold.wire`
(`openai_chat`, `anthropic_messages`), which the SDK adapters and the importers read with too;
this module only applies it to a request passing through. `parse` turns the client's JSON
into the mirror's inputs (system text, tool JSON, one `Message` per wire message); `build`
turns the mirror's answer back into the client's own protocol, forwarding every kept message
as the exact JSON the client sent (SPEC Y2, Y4) and rendering only what the projection
changed, through `core.render.export` like every request contextfold writes.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.values.messages import Message, ProviderCompactionPart
from ..errors import ContextfoldError
from ..guard.body import loads_bounded
from ..runtime.errors import RequestTooLargeError
from ..runtime.mirror import ProjectedItem, Synced
from ..wire import anthropic_messages, openai_chat, openai_responses
from ..wire.parts import system_text
from ..wire.reply import MalformedReply
from .prefix_cache import PrefixCache

Protocol = Literal["openai", "anthropic", "responses"]
MAX_BREAKPOINTS = 4  # Anthropic accepts at most four cache_control blocks per request


class WireError(ContextfoldError, ValueError):
    """The client's request is not one the protocol accepts (answered with a 400)."""

    kind = "bad_input"


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
    # Canonical JSON bytes of each wire message from `offset` on (`prefix_cache.dumps`),
    # what the forwarded body reuses for the messages it keeps verbatim.
    raw: list[bytes] | None = None
    reused: int = 0  # leading messages taken from the prefix cache, not parsed again


def parse(protocol: Protocol, body: Any, *, cache: PrefixCache | None = None,
          key: Any = None) -> Parsed:
    """The mirror's view of a chat completions / Messages request body. With `cache`, the
    messages a body from `cache.loads(raw, (protocol, key))` shares with the conversation's
    last one are reused, not read again."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) \
            or not body["messages"]:
        raise WireError("messages: at least one message is required")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise WireError("model: a model name is required")
    try:
        if protocol == "openai":
            return _parse_openai(body, model, cache, (protocol, key))
        return _parse_anthropic(body, model, cache, (protocol, key))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise WireError(f"messages: {exc}") from exc


def _read_all(wire: list[Any], offset: int, reader: Any, cache: PrefixCache | None,
              key: Any) -> tuple[list[Message], list[bytes] | None, int]:
    if cache is None:
        names: dict[str, str] = {}
        return [reader(m, call_names=names) for m in wire[offset:]], None, 0
    got = cache.read(key, wire, offset, reader)
    return got.messages, got.raw, got.reused


def _parse_openai(body: dict[str, Any], model: str, cache: PrefixCache | None = None,
                  key: Any = None) -> Parsed:
    wire = body["messages"]
    offset = 0
    systems: list[str] = []
    while offset < len(wire) and wire[offset].get("role") in ("system", "developer"):
        systems.append(system_text(wire[offset].get("content")))
        offset += 1
    msgs, raw, reused = _read_all(wire, offset, openai_chat.read_message, cache, key)
    return Parsed("openai", model, "\n\n".join(s for s in systems if s) or None,
                  openai_chat.read_tools(body.get("tools")), msgs, offset,
                  bool(body.get("stream")), raw, reused)


def _parse_anthropic(body: dict[str, Any], model: str, cache: PrefixCache | None = None,
                     key: Any = None) -> Parsed:
    msgs, raw, reused = _read_all(body["messages"], 0, anthropic_messages.read_message,
                                  cache, key)
    return Parsed("anthropic", model, system_text(body.get("system")) or None,
                  anthropic_messages.read_tools(body.get("tools")), msgs, 0,
                  bool(body.get("stream")), raw, reused)


# --------------------------------------------------------------------------- forwarding

_WIRE: dict[str, Any] = {"openai": openai_chat, "anthropic": anthropic_messages,
                         "responses": openai_responses}


def build(parsed: Parsed, body: dict[str, Any], synced: Synced) -> dict[str, Any]:
    """The body to forward: the client's own fields, the projected messages, max tokens
    clamped so prompt + reply fit the window (SPEC B1)."""
    return build_with_pieces(parsed, body, synced)[0]


def build_with_pieces(parsed: Parsed, body: dict[str, Any], synced: Synced
                      ) -> tuple[dict[str, Any], list[bytes | None]]:
    """`build`, with, for each forwarded message, the bytes the parse made of it when it is
    the client's own (what `stats.encode` reuses), else None."""
    out = dict(body)
    wire = body["messages"]
    if synced.as_sent():  # nothing projected differs from the client's list (issue 26)
        out["messages"] = list(wire)
        kept = list(parsed.raw) if parsed.raw is not None else \
            [None] * (len(wire) - parsed.offset)
        return _fitted(out, parsed, synced), [None] * parsed.offset + kept
    items = synced.items()
    render = _WIRE[parsed.protocol].render_message
    messages: list[Any] = list(wire[:parsed.offset])
    raw = parsed.raw
    pieces: list[bytes | None] = [None] * len(messages)
    anthropic = parsed.protocol == "anthropic"
    breakpoints = _count_breakpoints(body) if anthropic else 0
    skip = False
    prefix_at = 0  # where the checkpoint prefix is: after a provider's own compaction (Y7)
    for n, item in enumerate(items):
        if skip:
            skip = False
            continue
        if item.verbatim and item.index is not None:
            messages.append(wire[parsed.offset + item.index])  # the client's own JSON (Y2, Y4)
            pieces.append(None if raw is None else raw[item.index])
            continue
        if item.index is None and n == prefix_at and _provider_base(item.message):
            prefix_at = n + 1
            if anthropic:
                cache = breakpoints < MAX_BREAKPOINTS
                base = anthropic_messages.render_provider_base(item.message, cache=cache)
                if base is not None:
                    breakpoints += int(cache)
                    messages.append(base)
                    pieces.append(None)
            continue  # never shown to another protocol's provider
        rendered = render(item.message)
        if anthropic and rendered and item.index is None:
            # The checkpoint prefix (SPEC Y4: a stable prefix, worth a cache breakpoint),
            # or the recall block (SPEC L5) before the latest request.
            prefix = rendered[0]
            if n == prefix_at and breakpoints < MAX_BREAKPOINTS:
                prefix["content"][0]["cache_control"] = {"type": "ephemeral"}
                breakpoints += 1
            first = _verbatim_user(parsed, wire, items[n + 1] if n + 1 < len(items) else None)
            if first is not None and len(rendered) == 1:
                # Roles alternate in Messages: the summary joins the first kept user turn.
                merged = copy.deepcopy(first)
                merged["content"] = [*prefix["content"], *_blocks(merged.get("content"))]
                messages.append(merged)
                pieces.append(None)
                skip = True
                continue
        messages.extend(rendered)
        pieces += [None] * len(rendered)
    out["messages"] = messages
    return _fitted(out, parsed, synced), pieces


def _fitted(out: dict[str, Any], parsed: Parsed, synced: Synced) -> dict[str, Any]:
    """`out` with max tokens clamped so prompt + reply fit the window (SPEC B1), and a
    stream's usage asked for (E1)."""
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


def _provider_base(msg: Message) -> bool:
    return any(isinstance(p, ProviderCompactionPart) for p in msg.parts)


def _verbatim_user(parsed: Parsed, wire: list[Any],
                   item: ProjectedItem | None) -> dict[str, Any] | None:
    """The client's own JSON of `item` when it is a user message forwarded as sent."""
    if item is None or item.index is None or not item.verbatim or item.message.role != "user":
        return None
    first = wire[parsed.offset + item.index]
    return first if isinstance(first, dict) and first.get("role") == "user" else None


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    return list(content or [])


def _count_breakpoints(body: dict[str, Any]) -> int:
    text = json.dumps([body.get("system"), body.get("tools"), body.get("messages")])
    return text.count('"cache_control"')


# --------------------------------------------------------------------------- replies


def reply_of(protocol: Protocol, data: Any, model: str) -> Message | None:
    """The assistant message of a non-streamed answer, with its usage (SPEC E1); None when
    the answer holds none."""
    try:
        return _WIRE[protocol].read_reply(data, model).message
    except MalformedReply:
        return None


def sse_events(buffer: bytes) -> tuple[bytes, list[dict[str, Any]], bool]:
    """The `data:` events of the complete lines of a server-sent event stream read so far:
    what is left of `buffer` (an unfinished line), the JSON objects, and whether OpenAI's
    `[DONE]` came. Lines that are not JSON objects are skipped (the client gets them as sent)."""
    events: list[dict[str, Any]] = []
    done = False
    while b"\n" in buffer:
        line, buffer = buffer.split(b"\n", 1)
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            done = True
            continue
        try:
            event = loads_bounded(payload)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return buffer, events, done


@dataclass
class StreamReader:
    """Reads a server-sent event stream as it passes through, and rebuilds the reply with the
    protocol's `StreamAssembler` (the one reader of the proxy's streams, all three protocols;
    the Responses adapter reads the assembled response object too)."""

    protocol: Protocol
    model: str
    buffer: bytes = b""
    done: bool = False  # the stream's end arrived (OpenAI's [DONE], Anthropic's message_stop)
    assembler: (openai_chat.StreamAssembler | anthropic_messages.StreamAssembler
                | openai_responses.StreamAssembler) = field(init=False)

    def __post_init__(self) -> None:
        self.assembler = _WIRE[self.protocol].StreamAssembler()

    def feed(self, chunk: bytes) -> None:
        self.buffer, events, done = sse_events(self.buffer + chunk)
        self.done = self.done or done
        for event in events:
            self.assembler.add(event)

    def reply(self) -> Message | None:
        """The streamed reply (None when the stream neither finished nor reported usage)."""
        if not (self.done or self.assembler.finished or self.assembler.usage_seen):
            return None
        return self.assembler.reply(self.model).message


# --------------------------------------------------------------------------- errors


def too_large(protocol: Protocol, err: RequestTooLargeError) -> tuple[int, dict[str, Any]]:
    """The protocol's own context-length error for a request that cannot fit (SPEC Y3)."""
    wire = _WIRE[protocol]
    return wire.CONTEXT_LENGTH_STATUS, wire.context_length_error(
        err.estimated_tokens, err.safe_input_limit, f"contextfold proxy: {err}")


def bad_request(protocol: Protocol, message: str) -> dict[str, Any]:
    """The protocol's invalid-request error body."""
    return _WIRE[protocol].invalid_request_error(message)


__all__ = ["Parsed", "Protocol", "StreamReader", "WireError", "bad_request", "build",
           "build_with_pieces",
           "parse",
           "reply_of", "too_large"]
