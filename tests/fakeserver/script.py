"""What the fake server is told to do: its configuration and per-request scripted replies.

A test queues `Reply` objects; each request takes the next one of its kind (a summarisation
request first looks at the summary queue). With nothing queued, the server answers the way a
well-behaved model would: a short text reply, or a structured summary for a summarisation
request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

OpenAIFlavor = Literal["openai", "vllm", "llamacpp", "openrouter", "ollama"]
SummaryStyle = Literal["echo", "canned"]
ReplyKind = Literal["any", "chat", "summary"]


@dataclass(frozen=True)
class ToolCallSpec:
    """A tool call the fake model makes. `id` defaults to a protocol-style generated id."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Fields combine: e.g. `delay` then `status=429`.

    text            reply text (None: the default reply or, for a summarisation request, a
                    generated summary)
    tool_calls      tool calls to make (stop reason becomes tool use)
    status          answer with this HTTP status and the provider's genuine error body
                    (401, 429, 500, 503, 529, ...)
    error_body      a raw body to send with `status` instead of the genuine one
    retry_after     value of the Retry-After header (seconds) on an error answer
    delay           seconds to wait before answering (or before each stream chunk: chunk_delay)
    hang            never answer (until the client gives up or the server stops)
    malformed       200 with a body that is not valid JSON / a broken event stream
    empty           200 with no text and no tool calls
    cached_tokens   prompt tokens reported as read from the prompt cache
    cache_write     prompt tokens reported as written to the cache (Anthropic)
    stop_reason     protocol stop reason to report instead of the natural one
    report_usage    False: leave usage out (e.g. a local server that never reports it)
    cut_stream_after  end a streaming answer abruptly after this many text deltas
    compaction      the provider compacted the conversation (SPEC Y7): the answer starts
                    with its compaction block (Anthropic, this text as its `content`) or
                    item (Responses), with opaque `encrypted_content`
    """

    text: str | None = None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    status: int | None = None
    error_body: dict[str, Any] | str | None = None
    retry_after: float | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0
    hang: bool = False
    malformed: bool = False
    empty: bool = False
    cached_tokens: int | None = None
    cache_write: int | None = None
    stop_reason: str | None = None
    report_usage: bool = True
    cut_stream_after: int | None = None
    compaction: str | None = None


@dataclass(frozen=True)
class ServerConfig:
    """How the fake provider behaves when a reply does not say otherwise.

    context_window     enforce this many tokens (prompt, plus max_tokens when
                       `count_max_tokens`); over it, answer with the provider's real
                       context-length error
    openai_flavor      which OpenAI-compatible server's overflow error to imitate
    count_max_tokens   treat prompt + max_tokens over the window as an overflow (OpenAI's
                       "you requested N tokens (P in the messages, C in the completion)")
    api_key            when set, requests must carry exactly this key, else 401
    validate           reject requests the real provider would reject (orphan tool results,
                       calls without results, Anthropic role order)
    prompt_cache       report the longest previously seen message prefix as cached tokens
    summary_style      "echo": the summary quotes the request; "canned": fixed text
    default_text       the reply when nothing is scripted
    stream_chunk_chars size of the text pieces of a streamed answer
    """

    context_window: int | None = None
    openai_flavor: OpenAIFlavor = "openai"
    count_max_tokens: bool = True
    api_key: str | None = None
    validate: bool = True
    prompt_cache: bool = False
    summary_style: SummaryStyle = "echo"
    default_text: str = "ok"
    stream_chunk_chars: int = 8
