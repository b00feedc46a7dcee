"""The fake provider: one ASGI app speaking OpenAI chat completions and Anthropic Messages.

`POST /v1/chat/completions` and `POST /v1/messages`, plain JSON or server-sent events, with
the providers' real response shapes, usage fields, error bodies and status codes. Every
request body is recorded (with its real token count) so tests can assert on what the client
actually sent. State is shared with the test thread, so it is guarded by a lock.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from . import bodies
from .script import Reply, ReplyKind, ServerConfig, ToolCallSpec
from .summaries import is_summary_request, make_summary
from .tokens import REPLY_PRIMING, count_text, prompt_tokens

Protocol = Literal["openai", "anthropic"]


@dataclass
class RecordedRequest:
    """One request as the server received it, and how it answered."""

    protocol: Protocol
    body: dict[str, Any]
    prompt_tokens: int
    is_summary: bool
    stream: bool
    status: int | None = None  # None while the answer is pending (or it hung)
    reply_text: str | None = None  # the text answered (successful answers only)
    # ok | overflow | invalid (rejected by validation) | auth | scripted (a scripted error
    # status) | malformed | hung; None while the answer is pending
    outcome: str | None = None

    @property
    def max_tokens(self) -> int | None:
        return self.body.get("max_tokens") or self.body.get("max_completion_tokens")

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def system(self) -> str | None:
        if self.protocol == "anthropic":
            system = self.body.get("system")
            if isinstance(system, list):
                return "\n".join(b.get("text", "") for b in system)
            return system
        for message in self.messages:
            if message.get("role") in ("system", "developer"):
                return str(message.get("content"))
        return None


@dataclass
class _Answer:
    text: str
    calls: list[tuple[str, ToolCallSpec]]
    stop: Literal["end", "tool", "length"]
    output_tokens: int


@dataclass
class ServerState:
    """Configuration, scripts and the request log of one running fake server."""

    config: ServerConfig
    lock: threading.Lock = field(default_factory=threading.Lock)
    queues: dict[str, deque[Reply]] = field(
        default_factory=lambda: {"any": deque(), "chat": deque(), "summary": deque()}
    )
    requests: list[RecordedRequest] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    _prefixes: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=itertools.count)

    def enqueue(self, replies: tuple[Reply, ...], kind: ReplyKind) -> None:
        with self.lock:
            self.queues[kind].extend(replies)

    def next_reply(self, summary: bool) -> Reply:
        with self.lock:
            for kind in ("summary" if summary else "chat", "any"):
                if self.queues[kind]:
                    return self.queues[kind].popleft()
        return Reply()

    def record(self, entry: RecordedRequest) -> None:
        with self.lock:
            self.requests.append(entry)

    def new_id(self) -> int:
        with self.lock:
            return next(self._ids)

    def cached_prefix(self, body: dict[str, Any], running: list[int]) -> int:
        """Tokens of the longest message prefix an earlier request already sent."""
        head = json.dumps([body.get("system"), body.get("tools")], sort_keys=True)
        msgs = tuple(json.dumps(m, sort_keys=True) for m in body.get("messages") or [])
        with self.lock:
            best = 0
            for seen_head, seen in self._prefixes:
                if seen_head != head:
                    continue
                n = 0
                for a, b in zip(seen, msgs, strict=False):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
            self._prefixes.append((head, msgs))
        return running[best - 1] - REPLY_PRIMING if best else 0


# --------------------------------------------------------------------------- helpers


def _json_error(status: int, body: dict[str, Any] | str, retry_after: float | None) -> Response:
    headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else None
    if isinstance(body, str):
        return Response(body, status_code=status, headers=headers, media_type="application/json")
    return JSONResponse(body, status_code=status, headers=headers)


async def _wait(state: ServerState, seconds: float) -> None:
    """Sleep, but wake up when the server stops, so a hung answer never blocks shutdown."""
    end = time.monotonic() + seconds
    while not state.stopping.is_set() and time.monotonic() < end:
        await asyncio.sleep(min(0.02, max(0.0, end - time.monotonic())))


def _truncate(text: str, max_tokens: int | None) -> tuple[str, bool]:
    if max_tokens is None or count_text(text) <= max_tokens:
        return text, False
    # Cut by characters until it fits: crude but deterministic, like a model hitting its cap.
    cut = text
    while cut and count_text(cut) > max_tokens:
        cut = cut[: max(0, len(cut) - max(1, len(cut) // 10))]
    return cut, True


def _answer(state: ServerState, reply: Reply, body: dict[str, Any], summary: bool,
            prefix: str) -> _Answer:
    if reply.empty:
        return _Answer("", [], "end", 0)
    if reply.text is not None:
        text = reply.text
    elif summary:
        text = make_summary(body, state.config.summary_style)
    elif reply.tool_calls:
        text = ""
    else:
        text = state.config.default_text
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    text, cut = _truncate(text, max_tokens)
    calls = [] if cut else [
        (spec.id or f"{prefix}{state.new_id():04d}", spec) for spec in reply.tool_calls
    ]
    output = count_text(text) + sum(
        count_text(f"{s.name} {json.dumps(s.arguments)}") for _, s in calls
    )
    stop: Literal["end", "tool", "length"] = "length" if cut else ("tool" if calls else "end")
    return _Answer(text, calls, stop, output)


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] if text else []


def _sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


# --------------------------------------------------------------------------- shared flow


async def _handle(request: Request, protocol: Protocol,
                  respond: Callable[..., Response]) -> Response:
    state: ServerState = request.app.state.fake
    config = state.config
    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError:
        error = (bodies.openai_error("We could not parse the JSON body of your request.",
                                     "invalid_request_error")
                 if protocol == "openai"
                 else bodies.anthropic_error("invalid_request_error", "Invalid JSON body"))
        return JSONResponse(error, status_code=400)
    total, running = prompt_tokens(body)
    summary = is_summary_request(body)
    entry = RecordedRequest(protocol, body, total, summary, bool(body.get("stream")))
    state.record(entry)
    reply = state.next_reply(summary)

    def finish(response: Response, outcome: str) -> Response:
        entry.status = response.status_code
        entry.outcome = outcome
        return response

    if reply.hang:
        entry.outcome = "hung"
        await _wait(state, 3600)
        return finish(Response(status_code=503), "hung")
    if reply.delay:
        await _wait(state, reply.delay)
    given = _key_of(request, protocol)
    if config.api_key is not None and given != config.api_key:
        body401 = (bodies.openai_status_body(401, given) if protocol == "openai"
                   else bodies.anthropic_status_body(401))
        return finish(JSONResponse(body401, status_code=401), "auth")
    if reply.status is not None:
        error = reply.error_body if reply.error_body is not None else (
            bodies.openai_status_body(reply.status) if protocol == "openai"
            else bodies.anthropic_status_body(reply.status))
        return finish(_json_error(reply.status, error, reply.retry_after), "scripted")
    if config.validate:
        problem = (bodies.openai_request_problem(body) if protocol == "openai"
                   else bodies.anthropic_request_problem(body))
        if problem is not None:
            return finish(JSONResponse(problem, status_code=400), "invalid")
    overflow = _overflow(config, protocol, body, total)
    if overflow is not None:
        return finish(JSONResponse(overflow[1], status_code=overflow[0]), "overflow")
    cached = reply.cached_tokens
    if cached is None:
        cached = state.cached_prefix(body, running) if config.prompt_cache else 0
    cached = min(cached, total)
    cache_write = min(reply.cache_write or 0, total - cached)
    answer = _answer(state, reply, body, summary,
                     "call_fake" if protocol == "openai" else "toolu_fake")
    entry.reply_text = answer.text
    return finish(respond(state, reply, body, answer, total, cached, cache_write),
                  "malformed" if reply.malformed else "ok")


def _key_of(request: Request, protocol: Protocol) -> str | None:
    # Anthropic accepts `x-api-key` and (what current SDKs send) `Authorization: Bearer`.
    if protocol == "anthropic" and request.headers.get("x-api-key"):
        return request.headers.get("x-api-key")
    auth = request.headers.get("authorization", "")
    return auth[len("Bearer "):] if auth.startswith("Bearer ") else None


def _overflow(config: ServerConfig, protocol: Protocol, body: dict[str, Any],
              prompt: int) -> tuple[int, dict[str, Any]] | None:
    window = config.context_window
    if window is None:
        return None
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    over_prompt = prompt > window
    over_total = bool(config.count_max_tokens and max_tokens and prompt + max_tokens > window)
    if not (over_prompt or over_total):
        return None
    completion = max_tokens if config.count_max_tokens else None
    if protocol == "openai":
        return bodies.openai_overflow(config.openai_flavor, window, prompt, completion)
    return bodies.anthropic_overflow(window, prompt, completion)


# --------------------------------------------------------------------------- OpenAI


_OPENAI_FINISH = {"end": "stop", "tool": "tool_calls", "length": "length"}


def _openai_usage(total: int, output: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": total,
        "completion_tokens": output,
        "total_tokens": total + output,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0,
                                      "rejected_prediction_tokens": 0},
    }


def _openai_respond(state: ServerState, reply: Reply, body: dict[str, Any], answer: _Answer,
                    total: int, cached: int, cache_write: int) -> Response:
    finish = reply.stop_reason or _OPENAI_FINISH[answer.stop]
    ident = f"chatcmpl-fake{state.new_id():06d}"
    model = body.get("model", "fake-model")
    created = int(time.time())
    if reply.malformed:
        if body.get("stream"):
            return StreamingResponse(iter([b"data: {\"id\": \"chatcmpl-broken\", \"choi\n\n"]),
                                     media_type="text/event-stream")
        return Response('{"id": "chatcmpl-broken", "choices": [', media_type="application/json")
    if not body.get("stream"):
        message: dict[str, Any] = {"role": "assistant", "content": answer.text or None,
                                   "refusal": None}
        if answer.calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function",
                 "function": {"name": s.name, "arguments": json.dumps(s.arguments)}}
                for cid, s in answer.calls
            ]
        data: dict[str, Any] = {
            "id": ident, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish,
                         "logprobs": None}],
        }
        if reply.report_usage:
            data["usage"] = _openai_usage(total, answer.output_tokens, cached)
        return JSONResponse(data)
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        return _sse({"id": ident, "object": "chat.completion.chunk", "created": created,
                     "model": model, "choices": [{"index": 0, "delta": delta,
                                                  "finish_reason": finish_reason,
                                                  "logprobs": None}]})

    async def events() -> AsyncIterator[bytes]:
        yield chunk({"role": "assistant", "content": ""})
        for n, piece in enumerate(_chunks(answer.text, state.config.stream_chunk_chars)):
            if reply.cut_stream_after is not None and n >= reply.cut_stream_after:
                return
            if reply.chunk_delay:
                await _wait(state, reply.chunk_delay)
            yield chunk({"content": piece})
        for i, (cid, spec) in enumerate(answer.calls):
            yield chunk({"tool_calls": [{"index": i, "id": cid, "type": "function",
                                         "function": {"name": spec.name, "arguments": ""}}]})
            for piece in _chunks(json.dumps(spec.arguments), 12):
                yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
        yield chunk({}, finish)
        if include_usage and reply.report_usage:
            yield _sse({"id": ident, "object": "chat.completion.chunk", "created": created,
                        "model": model, "choices": [],
                        "usage": _openai_usage(total, answer.output_tokens, cached)})
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


# --------------------------------------------------------------------------- Anthropic


_ANTHROPIC_STOP = {"end": "end_turn", "tool": "tool_use", "length": "max_tokens"}


def _anthropic_respond(state: ServerState, reply: Reply, body: dict[str, Any],
                       answer: _Answer, total: int, cached: int, cache_write: int) -> Response:
    stop = reply.stop_reason or _ANTHROPIC_STOP[answer.stop]
    ident = f"msg_fake{state.new_id():06d}"
    model = body.get("model", "fake-model")
    usage = {
        "input_tokens": total - cached - cache_write,
        "output_tokens": answer.output_tokens,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": cache_write,
    }
    if not reply.report_usage:
        usage = {"input_tokens": 0, "output_tokens": 0}
    if reply.malformed:
        if body.get("stream"):
            return StreamingResponse(
                iter([b"event: message_start\ndata: {\"type\": \"message_start\", \"mess\n\n"]),
                media_type="text/event-stream")
        return Response('{"id": "msg_broken", "content": [', media_type="application/json")
    content: list[dict[str, Any]] = []
    if answer.text:
        content.append({"type": "text", "text": answer.text})
    content += [{"type": "tool_use", "id": cid, "name": s.name, "input": s.arguments}
                for cid, s in answer.calls]
    if not body.get("stream"):
        return JSONResponse({
            "id": ident, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage,
        })

    async def events() -> AsyncIterator[bytes]:
        start_usage = {**usage, "output_tokens": 1 if reply.report_usage else 0}
        yield _sse({"type": "message_start", "message": {
            "id": ident, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": start_usage}}, "message_start")
        index = 0
        if answer.text:
            yield _sse({"type": "content_block_start", "index": 0,
                        "content_block": {"type": "text", "text": ""}}, "content_block_start")
            yield _sse({"type": "ping"}, "ping")
            for n, piece in enumerate(_chunks(answer.text, state.config.stream_chunk_chars)):
                if reply.cut_stream_after is not None and n >= reply.cut_stream_after:
                    return
                if reply.chunk_delay:
                    await _wait(state, reply.chunk_delay)
                yield _sse({"type": "content_block_delta", "index": 0,
                            "delta": {"type": "text_delta", "text": piece}},
                           "content_block_delta")
            yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
            index = 1
        for cid, spec in answer.calls:
            yield _sse({"type": "content_block_start", "index": index,
                        "content_block": {"type": "tool_use", "id": cid, "name": spec.name,
                                          "input": {}}}, "content_block_start")
            for piece in _chunks(json.dumps(spec.arguments), 12):
                yield _sse({"type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece}},
                           "content_block_delta")
            yield _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
            index += 1
        yield _sse({"type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": usage["output_tokens"]}}, "message_delta")
        yield _sse({"type": "message_stop"}, "message_stop")

    return StreamingResponse(events(), media_type="text/event-stream")


# --------------------------------------------------------------------------- app


async def _chat_completions(request: Request) -> Response:
    return await _handle(request, "openai", _openai_respond)


async def _messages(request: Request) -> Response:
    return await _handle(request, "anthropic", _anthropic_respond)


def create_app(state: ServerState) -> Starlette:
    """The ASGI app; `state` is shared with the test that drives it."""
    app = Starlette(routes=[
        Route("/v1/chat/completions", _chat_completions, methods=["POST"]),
        Route("/v1/messages", _messages, methods=["POST"]),
    ])
    app.state.fake = state
    return app
