"""The two wire formats: OpenAI chat completions and Anthropic Messages, JSON and SSE.

Shapes, field names, stop reasons and event order follow the providers' API references, so
the official SDKs parse them exactly as they parse the real services.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from .script import Reply
from .state import Answer, ServerState, wait


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] if text else []


def _sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


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


def openai_response(state: ServerState, reply: Reply, body: dict[str, Any], answer: Answer,
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
                await wait(state, reply.chunk_delay)
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


def compaction_block(summary: str) -> dict[str, Any]:
    """Anthropic's compaction block (`compact_20260112`, `BetaCompactionBlock`): the summary
    in `content`, opaque `encrypted_content` to be sent back verbatim."""
    return {"type": "compaction", "content": summary,
            "encrypted_content": "EncAnthropic::" + summary.encode().hex()[:64]}


_ANTHROPIC_STOP = {"end": "end_turn", "tool": "tool_use", "length": "max_tokens"}


def anthropic_response(state: ServerState, reply: Reply, body: dict[str, Any],
                       answer: Answer, total: int, cached: int, cache_write: int) -> Response:
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
    if reply.compaction is not None:
        content.append(compaction_block(reply.compaction))
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
        if reply.compaction is not None:  # SPEC Y7: streamed as one compaction delta
            block = compaction_block(reply.compaction)
            yield _sse({"type": "content_block_start", "index": 0, "content_block": {
                "type": "compaction", "content": None, "encrypted_content": None}},
                "content_block_start")
            yield _sse({"type": "content_block_delta", "index": 0, "delta": {
                "type": "compaction_delta", "content": block["content"],
                "encrypted_content": block["encrypted_content"]}}, "content_block_delta")
            yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
            index = 1
        if answer.text:
            yield _sse({"type": "content_block_start", "index": index,
                        "content_block": {"type": "text", "text": ""}}, "content_block_start")
            yield _sse({"type": "ping"}, "ping")
            for n, piece in enumerate(_chunks(answer.text, state.config.stream_chunk_chars)):
                if reply.cut_stream_after is not None and n >= reply.cut_stream_after:
                    return
                if reply.chunk_delay:
                    await wait(state, reply.chunk_delay)
                yield _sse({"type": "content_block_delta", "index": index,
                            "delta": {"type": "text_delta", "text": piece}},
                           "content_block_delta")
            yield _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
            index += 1
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
