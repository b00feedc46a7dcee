"""OpenAI chat completions on the wire, read and written in one place.

Every OpenAI-compatible server speaks it (OpenAI, Azure, vLLM, Ollama, llama.cpp, LM Studio,
OpenRouter, DeepSeek, Groq, ...). Reading: a wire message (`read_message`), a whole response
(`read_reply`), a stream of chunks (`StreamAssembler`), the usage (`usage_of`). Writing: the
request messages are `core.render.export.to_openai` (one message alone: `render_message`), the body
`request_body`. The errors a proxy answers in this protocol's own shape: `context_length_error`,
`invalid_request_error`.

Usage (SPEC E1, E3): `prompt_tokens` counts every prompt token, cached ones included, and
`prompt_tokens_details.cached_tokens` says how many of them were read from the prompt cache.
So input = prompt - cached and cache_read = cached (cache_write is 0: the protocol does not
report writes), and input + cache_read + output is what the request occupied, each token once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.render.export import render_openai, to_openai
from ..core.values.messages import (
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from .parts import file_part, ignore, nonempty, text_of, tool_arguments
from .plain import plain
from .reply import MalformedReply, Reply, ReplyStatus, StopReason
from .usage import usage_cache_inside

if TYPE_CHECKING:  # names only annotations use
    from ..core.values.messages import Part
    from ..core.view.projection import Projection
    from .parts import ToolDefinition, Unknown

__all__ = ["StreamAssembler", "context_length_error", "invalid_request_error", "read_content",
           "read_message", "read_reply", "read_tools", "render_message", "request_body",
           "stop_reason_of", "to_openai", "usage_of"]

_FINISH: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
_COUNTS = {"prompt": "prompt_tokens", "output": "completion_tokens",
           "cache_read": "prompt_tokens_details.cached_tokens"}
CONTEXT_LENGTH_STATUS = 400


# --------------------------------------------------------------------------- usage


def usage_of(raw: Any, model: str | None) -> Usage | None:
    """`core.Usage` from a chat-completions usage object (None when it reports nothing or a
    field is not a token count): cached tokens are split out of `prompt_tokens`."""
    return usage_cache_inside(plain(raw), _COUNTS, model)


def stop_reason_of(finish: str | None, has_calls: bool) -> StopReason:
    """The common stop reason of a `finish_reason`."""
    # Several local servers (Ollama among them) say "stop" even when they called tools.
    if has_calls:
        return "tool_use"
    return _FINISH.get(finish or "", "other")


# --------------------------------------------------------------------------- reading messages


def read_content(content: Any, on_unknown: Unknown = ignore) -> list[Part]:
    """Parts of a message's `content`: a string, a list of parts, or null."""
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(text=content)] if content else []
    if not isinstance(content, list):
        on_unknown("content that is neither text nor a list of parts")
        return []
    parts: list[Part] = []
    for item in content:
        if isinstance(item, str):  # tolerated: some clients send bare strings
            if item:
                parts.append(TextPart(text=item))
            continue
        if not isinstance(item, dict):
            on_unknown("content part that is not an object")
            continue
        kind = item.get("type")
        if kind in ("text", "input_text", "output_text") and isinstance(item.get("text"), str):
            if item["text"]:
                parts.append(TextPart(text=item["text"]))
        elif kind == "refusal" and isinstance(item.get("refusal"), str):
            parts.append(TextPart(text=item["refusal"]))
        elif kind in ("image_url", "input_image"):
            # chat: {"image_url": {"url": ...}}; Responses: {"image_url": "..."} or a file_id
            image = item.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            parts.append(file_part(None, index=len(parts) + 1, url=url,
                                   name=nonempty(item.get("file_id"))))
        elif kind == "input_audio":
            audio = item.get("input_audio")
            audio = audio if isinstance(audio, dict) else {}
            fmt = audio.get("format") if isinstance(audio.get("format"), str) else "*"
            parts.append(file_part(f"audio/{fmt}", index=len(parts) + 1, kind="audio",
                                   data=audio.get("data")))
        elif kind in ("file", "input_file"):
            # chat nests the fields under "file"; Responses puts them on the part itself
            file = item.get("file") if kind == "file" else item
            parts.append(_file_reference(file if isinstance(file, dict) else {},
                                         len(parts) + 1))
        else:
            on_unknown(f"content part {kind!r}")
    return parts


def _file_reference(file: dict[str, Any], index: int) -> Part:
    """A file part's reference: `file_data` is a data URL (its MIME type and size are read
    from it) or bare base64; `file_url` a link; the name is the filename, else the file id."""
    data, url = file.get("file_data"), file.get("file_url")
    if isinstance(data, str) and data.startswith("data:"):
        data, url = None, data
    return file_part(None, index=index, kind="application", data=data, url=url,
                     name=nonempty(file.get("filename")) or nonempty(file.get("file_id")))


def reasoning_of(message: dict[str, Any]) -> str | None:
    """Reasoning text that vLLM, DeepSeek and OpenRouter send beside the content."""
    return nonempty(message.get("reasoning_content")) or nonempty(message.get("reasoning"))


def read_message(m: dict[str, Any], *, call_names: dict[str, str] | None = None,
                 on_unknown: Unknown = ignore,
                 legacy_call_id: str = "function_call") -> Message:
    """A chat-completions message (any role) as a core `Message`; it may have no parts.

    Leading system prompts are the caller's business (a request's prompt is not a message);
    a `system` / `developer` message read here stays a system message. `call_names` maps
    call ids to tool names: calls found here are added, results take their tool's name from
    it. A legacy `function_call` gets the id `legacy_call_id`. A message this protocol does
    not have (an unknown role, a tool message without its call id) raises ValueError; a
    malformed field raises KeyError or TypeError.
    """
    names = call_names if call_names is not None else {}
    role = m.get("role")
    if role in ("user", "system", "developer"):
        return Message(role="user" if role == "user" else "system",
                       parts=tuple(read_content(m.get("content"), on_unknown)))
    if role == "assistant":
        parts = tuple(_assistant_parts(m, names, on_unknown, legacy_call_id))
        if "model" not in m and "usage" not in m:  # a request's message (the proxy's hot path)
            return Message(role="assistant", parts=parts)
        model = text_of(m.get("model"))  # recorded lists carry these
        return Message(role="assistant", parts=parts, usage=usage_of(m.get("usage"), model),
                       model=model)
    if role in ("tool", "function"):
        call_id = m.get("tool_call_id")
        if role == "function":  # legacy: answers the latest call of that function
            call_id = next((cid for cid, n in reversed(names.items()) if n == m.get("name")),
                           None)
        if not nonempty(call_id):
            raise ValueError(f"{role} message without a tool_call_id")
        content = read_content(m.get("content"), on_unknown)
        output = "\n".join(p.text for p in content if isinstance(p, TextPart))
        files = [p for p in content if not isinstance(p, TextPart)]
        name = text_of(m.get("name")) or names.get(call_id)
        result = ToolResultPart(call_id=call_id, name=name, output=output)
        return Message(role="tool", parts=(result, *files))
    raise ValueError(f"unknown role {role!r}")


def _assistant_parts(m: dict[str, Any], names: dict[str, str], on_unknown: Unknown,
                     legacy_call_id: str) -> list[Part]:
    parts: list[Part] = []
    reasoning = reasoning_of(m)
    if reasoning:
        parts.append(ReasoningPart(text=reasoning))
    parts += read_content(m.get("content"), on_unknown)
    if nonempty(m.get("refusal")):
        parts.append(TextPart(text=m["refusal"]))
    for call in m.get("tool_calls") or []:
        fn = call["function"]
        names[call["id"]] = fn["name"]
        parts.append(ToolCallPart(id=call["id"], name=fn["name"],
                                  input=tool_arguments(fn.get("arguments"))))
    legacy = m.get("function_call")
    if isinstance(legacy, dict) and nonempty(legacy.get("name")):
        names[legacy_call_id] = legacy["name"]
        parts.append(ToolCallPart(id=legacy_call_id, name=legacy["name"],
                                  input=tool_arguments(legacy.get("arguments"))))
    return parts


def read_tools(tools: Any) -> list[dict[str, Any]]:
    """A request's tool definitions, each as its function object (name, description,
    parameters); entries that are not objects are left out."""
    return [t.get("function", t) for t in tools or [] if isinstance(t, dict)]


# --------------------------------------------------------------------------- writing


def render_message(msg: Message) -> list[dict[str, Any]]:
    """One message as `to_openai` writes it (see `core.render.export.render_openai`)."""
    return render_openai(msg)


def tool_definitions(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    """Tools as a request's `tools`."""
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.input_schema}}
            for t in tools]


def request_body(projection: Projection, system: str | None, *, model: str, max_tokens: int,
                 max_tokens_field: str = "max_tokens",
                 tools: Sequence[ToolDefinition] = (),
                 temperature: float | None = None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The request body for `projection`, and the repairs the export made.

    `max_tokens_field` names the output limit's field (OpenAI itself wants
    `max_completion_tokens`, most other servers `max_tokens`). Raises ValueError when there
    is nothing but a system prompt to send.
    """
    export = to_openai(projection, system)
    if not any(m["role"] != "system" for m in export.messages):
        raise ValueError("the request has no messages to send: add a pending message")
    body: dict[str, Any] = {"model": model, "messages": export.messages,
                            max_tokens_field: max_tokens}
    if tools:
        body["tools"] = tool_definitions(tools)
    if temperature is not None:
        body["temperature"] = temperature
    return body, export.repairs


# --------------------------------------------------------------------------- replies


def _reply_calls(calls: Any) -> list[dict[str, Any]]:
    """A reply's tool calls as a message carries them: a call without a name is left out
    (nothing could run it), one without an id gets `call_<n>`."""
    out: list[dict[str, Any]] = []
    for n, call in enumerate(calls if isinstance(calls, list) else []):
        fn = call.get("function") if isinstance(call, dict) else None
        name = nonempty(fn.get("name")) if isinstance(fn, dict) else None
        if fn is None or name is None:
            continue
        out.append({"id": nonempty(call.get("id")) or f"call_{n}", "type": "function",
                    "function": {"name": name, "arguments": fn.get("arguments")}})
    return out


def read_reply(body: Any, fallback_model: str, status: ReplyStatus = "complete") -> Reply:
    """A chat completion (its JSON or the SDK's object): the first choice's message, with the
    response's usage and model (`fallback_model` when it names none). Raises
    `MalformedReply` for a body that holds no message."""
    data = plain(body)
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices:
        raise MalformedReply("returned no choices")
    choice = choices[0] if isinstance(choices[0], dict) else {}
    wire = choice.get("message")
    if not isinstance(wire, dict):
        raise MalformedReply("returned a choice without a message")
    model = nonempty(data.get("model")) or fallback_model
    try:
        parts = _assistant_parts({**wire, "tool_calls": _reply_calls(wire.get("tool_calls"))},
                                 {}, ignore, "function_call")
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedReply(f"returned a message that cannot be read ({exc})") from None
    message = Message(role="assistant", parts=tuple(parts),
                      usage=usage_of(data.get("usage"), model), status=status, model=model)
    finish = text_of(choice.get("finish_reason"))
    return Reply(message, stop_reason_of(finish, bool(message.tool_calls)), finish,
                 text_of(data.get("id")))


class StreamAssembler:
    """What has arrived of one streamed completion, chunk by chunk (JSON or SDK chunks).

    `reply` reads the assembled message with `read_reply`, so a streamed reply is read by the
    same rules as a whole one. Only the first choice is assembled.
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: Any = None  # the usage object as sent (a last, choice-less chunk)
        self.model: str | None = None
        self.request_id: str | None = None

    def add(self, chunk: Any) -> str:
        """Fold one chunk in; return its text delta (may be empty)."""
        data = plain(chunk)
        if not isinstance(data, dict):
            return ""
        self.model = nonempty(data.get("model")) or self.model
        self.request_id = nonempty(data.get("id")) or self.request_id
        if data.get("usage") is not None:
            self.usage = data["usage"]
        piece = ""
        for choice in data.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                piece += self._delta(delta)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return piece

    def _delta(self, delta: dict[str, Any]) -> str:
        reasoning = reasoning_of(delta)
        if reasoning:
            self._reasoning.append(reasoning)
        for call in delta.get("tool_calls") or ():
            if not isinstance(call, dict):
                continue
            slot = self._calls.setdefault(call.get("index", 0),
                                          {"id": None, "name": "", "args": ""})
            slot["id"] = call.get("id") or slot["id"]
            fn = call.get("function")
            if isinstance(fn, dict):
                slot["name"] += fn.get("name") or ""
                slot["args"] += fn.get("arguments") or ""
        text = delta.get("content")
        if isinstance(text, str) and text:
            self._text.append(text)
            return text
        return ""

    @property
    def finished(self) -> bool:
        """A finish_reason arrived (the usage-only chunk, if any, comes after it)."""
        return self.finish is not None

    @property
    def usage_seen(self) -> bool:
        return self.usage is not None

    def reply(self, fallback_model: str, status: ReplyStatus = "complete") -> Reply:
        """The reply so far; status "error" marks a partial one."""
        calls = [{"id": s["id"], "type": "function",
                  "function": {"name": s["name"], "arguments": s["args"]}}
                 for _, s in sorted(self._calls.items())]
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text),
                                   "tool_calls": calls}
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        return read_reply({"id": self.request_id, "model": self.model, "usage": self.usage,
                           "choices": [{"index": 0, "message": message,
                                        "finish_reason": self.finish}]},
                          fallback_model, status)


# --------------------------------------------------------------------------- errors


def context_length_error(estimated_tokens: int, limit: int, note: str) -> dict[str, Any]:
    """The body OpenAI answers a request over the window with (`code` context_length_exceeded,
    status `CONTEXT_LENGTH_STATUS`), so a client handles it as it handles OpenAI's own."""
    return {"error": {
        "message": f"This model's maximum context length is {limit} tokens. However, your "
                   f"messages resulted in {estimated_tokens} tokens. Please reduce the length "
                   f"of the messages. ({note})",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}


def invalid_request_error(message: str) -> dict[str, Any]:
    """The protocol's invalid-request error body."""
    return {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": None}}
