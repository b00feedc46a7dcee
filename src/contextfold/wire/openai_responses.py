"""The OpenAI Responses API on the wire (`POST /v1/responses`), read and written in one place.

A request holds `instructions` and an `input` list of items: messages (`{"role": ...}` or
`{"type": "message", ...}`), `function_call` / `function_call_output` (and Codex's
`custom_tool_call` / `custom_tool_call_output`), `reasoning` items (with the provider's
opaque `encrypted_content`), and item types contextfold has no part for (hosted tools,
`compaction`, anything newer). Items are not messages one to one: what one model response
produced (reasoning, text, calls) is one assistant `Message`, so a call and the text before it
stay one reply (K1). A `compaction` item (OpenAI's own compaction, SPEC Y7) is held as it
came (`ProviderCompactionPart`) and opens a response: the model's output that follows it in
one response (in-call compaction, `context_management`) joins it, so the reply recorded and
the items the client sends back are the same message. `read_input` says which
items each message came from, so a face can forward every kept message as the exact items
the client sent (SPEC Y2, Y4, Y6).

A message's images and files (`input_image`, `input_file`) are `FilePart` references (name,
type, size; never the bytes, SPEC R5), in a user message and beside a tool output's text alike.
`read_input` is the one reader of Responses items and `render_message` the one writer: the
proxy (`proxy/responses.py`) and the OpenAI Agents integration (`integrations/responses_items`)
both call them; the writer's `ItemForm` says what differs between a provider's items
(`WIRE`) and a framework's history (`HISTORY`).

Reasoning is kept as a `ReasoningPart` whose `signature` is the encrypted content (stored,
never summarised, R2); an item of an unknown type is kept as assistant text naming it, and a
face forwards the item itself, unchanged.

Usage (SPEC E1, E3): `input_tokens` counts every prompt token and
`input_tokens_details.cached_tokens` how many came from the prompt cache, so input = input -
cached and cache_read = cached, as in chat completions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.values.messages import (
    FilePart,
    Message,
    ProviderCompactionPart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from . import openai_chat
from .parts import nonempty, text_of, tool_arguments
from .plain import plain
from .reply import MalformedReply, Reply, ReplyStatus, StopReason
from .usage import usage_cache_inside

if TYPE_CHECKING:
    from ..core.values.messages import Part

__all__ = ["CONTEXT_LENGTH_STATUS", "HISTORY", "WIRE", "Grouped", "ItemForm", "StreamAssembler",
           "call_item", "context_length_error", "file_note", "invalid_request_error",
           "message_item", "output_text", "previous_not_found_error", "read_input",
           "read_reply", "read_tools", "render_message", "usage_of"]

Item = dict[str, Any]
CONTEXT_LENGTH_STATUS = 400
CALL_TYPES = {"function_call", "custom_tool_call"}
OUTPUT_TYPES = {"function_call_output": "function_call",
                "custom_tool_call_output": "custom_tool_call"}
_COUNTS = {"prompt": "input_tokens", "output": "output_tokens",
           "cache_read": "input_tokens_details.cached_tokens"}
_TEXT_TYPES = {"input_text", "output_text", "text", "summary_text", "reasoning_text"}


# --------------------------------------------------------------------------- usage


def usage_of(raw: Any, model: str | None) -> Usage | None:
    """`core.Usage` from a Responses usage object (cached tokens split out of the input)."""
    return usage_cache_inside(plain(raw), _COUNTS, model)


# --------------------------------------------------------------------------- reading input


@dataclass(frozen=True)
class Grouped:
    """One message read from the input, and the positions of the items it came from."""

    message: Message
    items: tuple[int, ...]


def item_text(content: Any) -> str:
    """The text of an item's `content` / `output` / `summary` (a string or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out: list[str] = []
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict):
            if part.get("type") in _TEXT_TYPES and isinstance(part.get("text"), str):
                out.append(part["text"])
            elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                out.append(part["refusal"])
    return "\n".join(t for t in out if t)


def _call_part(item: Item) -> ToolCallPart:
    call_id = nonempty(item.get("call_id"))
    name = nonempty(item.get("name"))
    if call_id is None or name is None:
        raise ValueError(f"{item.get('type')} item without a call_id and a name")
    raw = item.get("arguments") if item.get("type") == "function_call" else item.get("input")
    return ToolCallPart(id=call_id, name=name, input=tool_arguments(raw))


def _output_files(output: Any) -> list[FilePart]:
    """The images and files of a tool output given as a list of parts: references beside
    the result (its text is `item_text`), as in a Messages `tool_result` (SPEC R5)."""
    if not isinstance(output, list):
        return []
    return [p for p in openai_chat.read_content(output) if isinstance(p, FilePart)]


def opaque_text(item: Item) -> str:
    """What an item contextfold has no part for is stored as: its type and its JSON, so
    nothing is dropped silently and recall can still find it (the face forwards the item)."""
    body = json.dumps({k: v for k, v in item.items() if k != "id"}, ensure_ascii=False,
                      sort_keys=True, default=str)
    return f"[{item.get('type')}] {body}"


def read_input(items: Sequence[Any], *, call_names: dict[str, str] | None = None
               ) -> list[Grouped]:
    """The messages of a request's `input` items, each with the items it came from.

    Consecutive reasoning, assistant text and calls are one assistant message (one model
    response); reasoning after text or a call opens the next one. Raises ValueError for an
    item that is not one of the protocol's (no role and no type, a call without an id),
    KeyError / TypeError for a malformed field.
    """
    names = call_names if call_names is not None else {}
    out: list[Grouped] = []
    reply: list[Part] = []
    reply_items: list[int] = []

    def flush() -> None:
        if reply_items:
            out.append(Grouped(Message(role="assistant", parts=tuple(reply)),
                               tuple(reply_items)))
            reply.clear()
            reply_items.clear()

    for i, raw in enumerate(items):
        item = plain(raw)
        if not isinstance(item, dict):
            raise ValueError(f"input[{i}] is not an item object")
        kind = item.get("type")
        role = item.get("role")
        if kind in (None, "message") and role in ("user", "system", "developer"):
            flush()
            parts = tuple(openai_chat.read_content(item.get("content")))
            out.append(Grouped(Message(role="user" if role == "user" else "system",
                                       parts=parts), (i,)))
        elif kind in (None, "message") and role == "assistant":
            if any(isinstance(p, ToolCallPart) for p in reply):
                flush()  # text after a call is the next response
            text = item_text(item.get("content"))
            if text:
                reply.append(TextPart(text=text))
            reply_items.append(i)
        elif kind in CALL_TYPES:
            part = _call_part(item)
            names[part.id] = part.name
            reply.append(part)
            reply_items.append(i)
        elif kind == "reasoning":
            if any(isinstance(p, ToolCallPart | TextPart) for p in reply):
                flush()  # reasoning opens a new response
            text = item_text(item.get("summary")) or item_text(item.get("content"))
            reply.append(ReasoningPart(text=text,
                                       signature=nonempty(item.get("encrypted_content"))))
            reply_items.append(i)
        elif kind in OUTPUT_TYPES:
            flush()
            call_id = nonempty(item.get("call_id"))
            if call_id is None:
                raise ValueError(f"input[{i}]: {kind} without a call_id")
            out.append(Grouped(Message(role="tool", parts=(ToolResultPart(
                call_id=call_id, name=names.get(call_id), output=item_text(item.get("output"))),
                *_output_files(item.get("output")))), (i,)))
        elif kind == "compaction":
            # SPEC Y7: the provider's own compaction, opaque; it opens a response (what the
            # model answered after an in-call compaction joins it, as it does in the reply).
            flush()
            reply.append(ProviderCompactionPart(provider="openai", data=item))
            reply_items.append(i)
        elif isinstance(kind, str) and kind:
            flush()  # hosted tools and anything newer: one opaque message each
            out.append(Grouped(Message(role="assistant", parts=(TextPart(
                text=opaque_text(item)),)), (i,)))
        else:
            raise ValueError(f"input[{i}] has neither a known role nor a type")
    flush()
    return out


def read_tools(tools: Any) -> list[dict[str, Any]]:
    """A request's tool definitions as the sizer counts them (function tools are flat in
    the Responses API: name, description, parameters on the tool itself)."""
    out: list[dict[str, Any]] = []
    for tool in tools or []:
        if isinstance(tool, dict):
            out.append({k: v for k, v in tool.items() if k != "type" or v != "function"})
    return out


# --------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class ItemForm:
    """How messages are written as input items, for the two readers there are. `WIRE`: the
    provider itself (the proxy), beside a client's own items: typed message items, system
    text as `developer`, the provider's encrypted reasoning replayed. `HISTORY`: a framework
    that sends its items again through its own converters (the Agents SDK session): easy
    input messages (`{"role", "content": text}`), files named in the text (the bytes are not
    kept, SPEC R5), a failed tool's output marked (an output item has no error flag), no
    reasoning (refused without the provider's item id), no calls of an errored or aborted
    reply (they never got results)."""

    typed: bool = True
    system_role: str = "developer"
    name_files: bool = False
    mark_errors: bool = False
    reasoning: bool = True
    closed_calls: bool = True  # the calls of an errored or aborted reply are written


WIRE = ItemForm()
HISTORY = ItemForm(typed=False, system_role="system", name_files=True, mark_errors=True,
                   reasoning=False, closed_calls=False)


def message_item(role: str, text: str, form: ItemForm = WIRE) -> Item:
    """A message item of `text` said by `role` (user, assistant, or the form's system role)."""
    if not form.typed:
        return {"role": role, "content": text}
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def file_note(part: FilePart) -> str:
    """What replaces a file when it is sent again: its name (the bytes are not kept, R5)."""
    return f"[attached file: {part.name} ({part.media_type})]"


def call_item(call: ToolCallPart) -> Item:
    """A `function_call` item: the call's id and name verbatim, its arguments as a string
    (JSON when they were parsed, the string the model wrote otherwise)."""
    return {"type": "function_call", "call_id": call.id, "name": call.name,
            "arguments": call.input if isinstance(call.input, str)
            else json.dumps(call.input, ensure_ascii=False)}


def render_message(msg: Message, original: Sequence[Item] = (), form: ItemForm = WIRE
                   ) -> list[Item]:
    """One message as input items, in `form` (the one writer of Responses items: the proxy
    and the Agents SDK session both call it). `original`: the items the client sent for it,
    when it sent any, so a changed projection copy (masked or clipped tool output, V1/K6)
    keeps each item's own type and ids and changes only the output text."""
    if msg.role == "tool":
        return _output_items(msg, original, form)
    if msg.role != "assistant":
        role = "user" if msg.role == "user" else form.system_role
        text = msg.text if not form.name_files else "\n".join(
            p.text if isinstance(p, TextPart) else file_note(p) for p in msg.parts
            if (isinstance(p, TextPart) and p.text) or isinstance(p, FilePart))
        return [message_item(role, text, form)] if text else []
    by_call = {str(it.get("call_id")): it for it in original if it.get("type") in CALL_TYPES}
    calls = form.closed_calls or not msg.is_closed_without_result
    out: list[Item] = []
    texts: list[str] = []
    text_at: int | None = None  # an easy message holds the reply's whole text, in one place
    for part in msg.parts:
        if isinstance(part, ProviderCompactionPart):
            if part.provider == "openai":  # SPEC Y7: another provider's is never shown
                out.append(dict(part.data))
        elif isinstance(part, TextPart | FilePart):
            text = part.text if isinstance(part, TextPart) else \
                file_note(part) if form.name_files else ""
            if text and form.typed:
                out.append(message_item("assistant", text, form))
            elif text:
                text_at = len(out) if text_at is None else text_at
                texts.append(text)
        elif isinstance(part, ReasoningPart) and part.signature and form.reasoning:
            # Only the provider's own encrypted reasoning can be replayed (R2: kept opaque).
            out.append({"type": "reasoning", "summary": (
                [{"type": "summary_text", "text": part.text}] if part.text else []),
                "encrypted_content": part.signature})
        elif isinstance(part, ToolCallPart) and calls:
            given = by_call.get(part.id)
            out.append(given if given is not None else call_item(part))
    if text_at is not None:
        out.insert(text_at, message_item("assistant", "\n".join(texts), form))
    return out


def _output_items(msg: Message, original: Sequence[Item], form: ItemForm) -> list[Item]:
    """A tool message's results as output items (the client's own, output text changed,
    where it sent them); the form's file names go with the last result."""
    results = msg.tool_results
    given = [it for it in original if it.get("type") in OUTPUT_TYPES]
    files = [file_note(p) for p in msg.parts if isinstance(p, FilePart)] \
        if form.name_files else []
    items: list[Item] = []
    for n, result in enumerate(results):
        if n < len(given):
            items.append({**given[n], "output": result.output})
            continue
        output = f"[tool error] {result.output}" if form.mark_errors and result.is_error \
            else result.output
        lines = (output, *(files if n == len(results) - 1 else ()))
        items.append({"type": "function_call_output", "call_id": result.call_id,
                      "output": "\n".join(t for t in lines if t) or "(no output)"})
    return items


# --------------------------------------------------------------------------- replies

_STATUS: dict[str, StopReason] = {"completed": "end_turn", "incomplete": "max_tokens"}


def output_text(items: Sequence[Any]) -> str:
    """The visible text of a response's output items."""
    return "\n".join(item_text(it.get("content")) for it in map(plain, items)
                     if isinstance(it, dict) and it.get("type") == "message")


def read_reply(body: Any, fallback_model: str, status: ReplyStatus = "complete") -> Reply:
    """A response object (JSON or the SDK's `Response`): its output items as one assistant
    message, with its usage (SPEC E1). Raises `MalformedReply` when it holds no output."""
    data = plain(body)
    output = data.get("output") if isinstance(data, dict) else None
    if not isinstance(output, list):
        raise MalformedReply("returned a response without an output list")
    model = nonempty(data.get("model")) or fallback_model
    try:
        groups = read_input(output)
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedReply(f"returned output that cannot be read ({exc})") from None
    parts = tuple(p for g in groups for p in g.message.parts)
    message = Message(role="assistant", parts=parts, usage=usage_of(data.get("usage"), model),
                      status=status, model=model)
    raw = text_of(data.get("status"))
    stop: StopReason = "tool_use" if message.tool_calls else _STATUS.get(raw or "", "other")
    return Reply(message, stop, raw, text_of(data.get("id")))


class StreamAssembler:
    """What has arrived of one streamed response, event by event (JSON or SDK events).

    The terminal event (`response.completed`, `.incomplete`, `.failed`) carries the whole
    response, which `reply` reads with `read_reply`; before it, the items announced done.
    """

    def __init__(self) -> None:
        self.items: dict[int, Item] = {}
        self.response: Item | None = None
        self.model: str | None = None
        self.response_id: str | None = None
        self.terminal: str | None = None

    def add(self, event: Any) -> str:
        """Fold one event in; return its text delta (may be empty)."""
        data = plain(event)
        if not isinstance(data, dict):
            return ""
        kind = data.get("type")
        response = data.get("response")
        if isinstance(response, dict):
            self.model = nonempty(response.get("model")) or self.model
            self.response_id = nonempty(response.get("id")) or self.response_id
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                self.response = response
                self.terminal = kind
        if kind == "response.output_item.done" and isinstance(data.get("item"), dict):
            index = data.get("output_index")
            self.items[index if isinstance(index, int) else len(self.items)] = data["item"]
        if kind == "response.output_text.delta" and isinstance(data.get("delta"), str):
            return data["delta"]
        return ""

    @property
    def finished(self) -> bool:
        return self.terminal is not None

    @property
    def usage_seen(self) -> bool:
        """Whether the terminal event reported the response's usage."""
        return isinstance(self.response, dict) and self.response.get("usage") is not None

    def whole(self) -> Item:
        """The response as one object: the terminal event's, with the items announced done
        (in output order) as its output when it lists none (or before it arrives)."""
        response = dict(self.response or {})
        if not response.get("output") and self.items:
            response["output"] = [self.items[k] for k in sorted(self.items)]
        return response

    def reply(self, fallback_model: str, status: ReplyStatus = "complete") -> Reply:
        """The reply: the terminal event's response, else the items done so far."""
        response = self.whole()
        response.setdefault("output", [])
        response.setdefault("model", self.model)
        response.setdefault("id", self.response_id)
        if self.terminal == "response.failed":
            status = "error"
        return read_reply(response, fallback_model, status)


# --------------------------------------------------------------------------- errors


def context_length_error(estimated_tokens: int, limit: int, note: str) -> dict[str, Any]:
    """The body OpenAI answers a Responses request over the window with (`code`
    context_length_exceeded, status 400), so Codex and the SDK react as to OpenAI's own."""
    return {"error": {
        "message": f"Your input exceeds the context window of this model. The maximum "
                   f"context length is {limit} tokens; the input has about "
                   f"{estimated_tokens} tokens. ({note})",
        "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}}


def invalid_request_error(message: str, param: str | None = None) -> dict[str, Any]:
    """The protocol's invalid-request error body."""
    return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": None}}


def previous_not_found_error(response_id: str) -> dict[str, Any]:
    """OpenAI's answer to a `previous_response_id` it does not hold (status 400)."""
    return {"error": {"message": f"Previous response with id '{response_id}' not found.",
                      "type": "invalid_request_error", "param": "previous_response_id",
                      "code": "previous_response_not_found"}}
