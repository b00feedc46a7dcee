"""The providers' own compaction in the fake (SPEC Y7), as their docs describe it.

* Anthropic on demand (beta `compact-2026-09-04`): a request with a top-level `compaction`
  (`{"type": "summarize"}`) is answered with one `compaction` block alone — readable
  `content`, a `signature` over it — and `stop_reason: "compaction"` (a summary longer than
  `max_tokens` is cut: no block, `stop_reason: "max_tokens"`); streamed, the block
  comes whole in `content_block_start`, with no delta. Its usage is reported in
  `usage.iterations`, the top-level counts being zero. A later request carrying the block
  must send it back exactly: a changed `content` or `signature` is
  `compaction_signature_invalid`, an extra field (`citations: null`) a validation error, and
  both need the beta header. `compaction` and `context_management` never go together.
* OpenAI Responses in the call: `context_management: [{"type": "compaction",
  "compact_threshold": N}]` with a prompt of N tokens or more puts an encrypted
  `compaction` item first in the output (`responses.py`).

The summary is made from the request itself (the user turns it holds), so a test knows what
the provider "remembered" without scripting the answer; the scripted queue is left to the
conversation's turns, which may run beside a background compaction.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from .bodies import anthropic_error
from .state import ServerState

Body = dict[str, Any]
BETA = "compact-2026-09-04"
_KEY = b"fake-anthropic-compaction"
# What a block may carry back (the SDK's `BetaCompactionBlockParam`).
_BLOCK_FIELDS = {"type", "content", "signature", "encrypted_content", "tool_changes",
                 "cache_control"}


def sign(content: str) -> str:
    """The fake's signature over a block's summary."""
    return "sig_" + hmac.new(_KEY, content.encode(), hashlib.sha256).hexdigest()


def is_on_demand(protocol: str, body: Body) -> bool:
    """An Anthropic compaction request (a top-level `compaction` object)."""
    return protocol == "anthropic" and isinstance(body.get("compaction"), dict)


def _signed_blocks(body: Body) -> list[tuple[int, int, Body]]:
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    return [(i, j, b) for i, m in enumerate(messages) if isinstance(m, dict)
            and isinstance(m.get("content"), list) for j, b in enumerate(m["content"])
            if isinstance(b, dict) and b.get("type") == "compaction" and "signature" in b]


def request_problem(body: Body, headers: Mapping[str, str]) -> Body | None:
    """The 400 the Messages API answers a request of on-demand compaction with, if any."""
    betas = {b.strip() for b in headers.get("anthropic-beta", "").split(",")}
    on_demand = isinstance(body.get("compaction"), dict)
    if on_demand and BETA not in betas:
        return anthropic_error("invalid_request_error",
                               f"compaction: requires anthropic-beta: {BETA}")
    if on_demand and body.get("context_management") is not None:
        return anthropic_error("invalid_request_error",
                               "compaction: cannot be combined with context_management")
    for i, j, block in _signed_blocks(body):
        where = f"messages.{i}.content.{j}"
        if BETA not in betas:
            return anthropic_error("invalid_request_error", f"{where}: Input tag 'compaction' "
                                   "found using 'type' does not match any of the expected tags")
        extra = sorted(set(block) - _BLOCK_FIELDS)
        if extra:
            return anthropic_error("invalid_request_error",
                                   f"{where}.compaction.{extra[0]}: Extra inputs are not "
                                   "permitted")
        if not isinstance(block.get("content"), str) or block.get("tool_changes") != [] or \
                not hmac.compare_digest(str(block.get("signature")), sign(block["content"])):
            return anthropic_error("invalid_request_error", f"{where}: "
                                   "compaction_signature_invalid: send the block exactly as "
                                   "it was returned")
    if on_demand and not body.get("messages"):
        return anthropic_error("invalid_request_error", "compaction_nothing_to_summarize")
    return None


def _user_texts(body: Body) -> list[str]:
    out = []
    for m in body.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else \
            content if isinstance(content, list) else []
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "text" and m.get("role") == "user":
                out.append(" ".join(str(b.get("text", "")).split())[:80])
            elif isinstance(b, dict) and b.get("type") == "compaction" and b.get("content"):
                out.append(str(b["content"]))  # compacting again: the old summary goes in
    return out


def summary_of(body: Body) -> str:
    """The provider's summary of the conversation a request holds."""
    return "Summary of the conversation so far. The user asked: " + " | ".join(_user_texts(body))


def _sse(data: Body) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


def on_demand_response(state: ServerState, body: Body, total: int) -> Response:
    """The answer to an on-demand compaction request: the signed block alone."""
    summary = summary_of(body)
    # `tool_changes: []`: the range changed no tool (a field beside the two that must come
    # back unchanged too).
    block = {"type": "compaction", "content": summary, "signature": sign(summary),
             "tool_changes": []}
    output = max(1, len(summary) // 4)
    # A summary cut off by `max_tokens` is no summary: a 200 with no block.
    cut = isinstance(body.get("max_tokens"), int) and body["max_tokens"] < output
    content, stop = ([], "max_tokens") if cut else ([block], "compaction")
    usage = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
             "cache_creation_input_tokens": 0,
             "iterations": [{"type": "compaction", "input_tokens": total,
                             "output_tokens": output}]}
    ident = f"msg_fake{state.new_id():06d}"
    model = body.get("model", "fake-model")
    message = {"id": ident, "type": "message", "role": "assistant", "model": model,
               "content": content, "stop_reason": stop, "stop_sequence": None,
               "usage": usage}
    if not body.get("stream"):
        return JSONResponse(message)

    async def events() -> AsyncIterator[bytes]:
        yield _sse({"type": "message_start", "message": {**message, "content": [],
                                                         "stop_reason": None}})
        yield _sse({"type": "ping"})
        if content:  # the block arrives whole: no delta
            yield _sse({"type": "content_block_start", "index": 0, "content_block": block})
            yield _sse({"type": "content_block_stop", "index": 0})
        yield _sse({"type": "message_delta", "delta": {"stop_reason": stop,
                                                       "stop_sequence": None},
                    "usage": usage})
        yield _sse({"type": "message_stop"})

    return StreamingResponse(events(), media_type="text/event-stream")


def in_call_threshold(body: Body) -> int | None:
    """The `compact_threshold` of a Responses request's in-call compaction (None: none)."""
    managed = body.get("context_management")
    for entry in managed if isinstance(managed, list) else []:
        if isinstance(entry, dict) and entry.get("type") == "compaction":
            threshold = entry.get("compact_threshold")
            return threshold if isinstance(threshold, int) else 0
    return None


def responses_summary(view: Body) -> str:
    """What an in-call compaction "remembers" of a Responses request (its chat view)."""
    return summary_of(view)


__all__ = ["BETA", "in_call_threshold", "is_on_demand", "on_demand_response",
           "request_problem", "responses_summary", "sign", "summary_of"]
