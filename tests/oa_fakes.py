"""An offline OpenAI Agents SDK `Model` for the integration tests (no network).

`WindowModel` has a context window; every request it receives (instructions + Responses input
items + tools) is judged by a `Ledger` (validity oracles, real token count vs the window) and
answered by the scripted workload (`framework_workload.reply_for`): tool calls, then the
answer. It streams too (text deltas, then `response.completed`), and reports usage per request
the way the SDK's own models do.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

from agents import function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from contextfold.integrations.responses_items import chat_messages
from tests.framework_workload import Ledger, Reply, lookup, reply_for

_ids = itertools.count(1)


@function_tool
def lookup_record(record_id: str) -> str:
    """Look up a record by its id (R-0000) and return its full text."""
    return lookup(record_id)


def tool_json(tools: list[Any]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": getattr(t, "description", ""),
             "parameters": getattr(t, "params_json_schema", {})} for t in tools]


class WindowModel(Model):
    """A scripted model with a `window`; `ledger` records what it was sent."""

    def __init__(self, model: str, window: int, ledger: Ledger, *,
                 handoff_to: str | None = None, handoff_after: int | None = None) -> None:
        self.model = model
        self.window = window
        self.ledger = ledger
        self.handoff_to = handoff_to
        self.handoff_after = handoff_after  # answer with a handoff at this request number
        self.seen = 0

    def _decide(self, instructions: str | None, input: Any,
                tools: list[Any], handoffs: list[Any]) -> tuple[list[Any], int]:
        items = input if isinstance(input, list) else [{"role": "user", "content": input}]
        chat = chat_messages(items, instructions)
        tokens = self.ledger.check(chat, window=self.window, tools=tool_json(tools) or None)
        self.seen += 1
        if self.handoff_to and self.seen == self.handoff_after and handoffs:
            h = next(h for h in handoffs if self.handoff_to in h.tool_name)
            return [_call(h.tool_name, {})], tokens
        reply: Reply = reply_for(chat)
        if reply.calls:
            return [_call("lookup_record", {"record_id": r}) for r in reply.calls], tokens
        self.ledger.answers.append(reply.text)
        return [ResponseOutputMessage(
            id=f"msg_{next(_ids)}", type="message", role="assistant", status="completed",
            content=[ResponseOutputText(type="output_text", text=reply.text, annotations=[])],
        )], tokens

    async def get_response(self, system_instructions, input, model_settings, tools,
                           output_schema, handoffs, tracing, *, previous_response_id=None,
                           conversation_id=None, prompt=None, **_: Any) -> ModelResponse:
        output, tokens = self._decide(system_instructions, input, tools, handoffs)
        out_tokens = 20 * len(output)
        return ModelResponse(output=output, usage=Usage(
            requests=1, input_tokens=tokens, output_tokens=out_tokens,
            total_tokens=tokens + out_tokens), response_id=f"resp_{next(_ids)}")

    async def stream_response(self, system_instructions, input, model_settings, tools,
                              output_schema, handoffs, tracing, *, previous_response_id=None,
                              conversation_id=None, prompt=None,
                              **_: Any) -> AsyncIterator[Any]:
        output, tokens = self._decide(system_instructions, input, tools, handoffs)
        seq = itertools.count()
        for item in output:
            if isinstance(item, ResponseOutputMessage):
                for word in item.content[0].text.split(" "):
                    yield ResponseTextDeltaEvent(
                        type="response.output_text.delta", item_id=item.id, output_index=0,
                        content_index=0, delta=word + " ", logprobs=[],
                        sequence_number=next(seq))
        usage = ResponseUsage(
            input_tokens=tokens, output_tokens=20, total_tokens=tokens + 20,
            input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0))
        response = Response(id=f"resp_{next(_ids)}", created_at=0, model=self.model,
                            object="response", output=output, parallel_tool_calls=True,
                            tool_choice="auto", tools=[], usage=usage)
        yield ResponseCompletedEvent(type="response.completed", response=response,
                                     sequence_number=next(seq))


def _call(name: str, args: dict[str, Any]) -> ResponseFunctionToolCall:
    n = next(_ids)
    return ResponseFunctionToolCall(type="function_call", id=f"fc_{n}", call_id=f"call_{n}",
                                    name=name, arguments=json.dumps(args), status="completed")
