"""pydantic-ai's own offline models, scripted with the framework workload.

`window_model` is a `FunctionModel` (plain and streaming) whose every request is put in
chat-completions shape part for part, as pydantic-ai's OpenAI model sends it (nothing
repaired), and judged by a `Ledger` against its window; it answers with `reply_for`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.usage import RequestUsage

from tests.framework_workload import Ledger, lookup, reply_for


def to_chat(messages: Sequence[ModelMessage], instructions: str | None) -> list[dict[str, Any]]:
    """pydantic-ai messages in chat-completions shape, part for part (no repair)."""
    out: list[dict[str, Any]] = []
    system = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
              if isinstance(p, SystemPromptPart)]
    if system or instructions:
        out.append({"role": "system", "content": "\n\n".join([*system, instructions or ""])})
    for m in messages:
        if isinstance(m, ModelResponse):
            texts = [p.content for p in m.parts if isinstance(p, TextPart) and p.content]
            calls = [p for p in m.parts if isinstance(p, ToolCallPart)]
            msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            if calls:
                msg["tool_calls"] = [{"id": c.tool_call_id, "type": "function", "function": {
                    "name": c.tool_name, "arguments": c.args_as_json_str()}} for c in calls]
            out.append(msg)
            continue
        for p in m.parts:
            if isinstance(p, ToolReturnPart):
                content = p.content if isinstance(p.content, str) else json.dumps(p.content)
                out.append({"role": "tool", "tool_call_id": p.tool_call_id, "content": content})
            elif isinstance(p, RetryPromptPart) and p.tool_name is not None:
                out.append({"role": "tool", "tool_call_id": p.tool_call_id,
                            "content": str(p.content)})
            elif isinstance(p, UserPromptPart | RetryPromptPart):
                content = p.content if isinstance(p.content, str) else str(p.content)
                out.append({"role": "user", "content": content})
    return out


def window_model(name: str, window: int, ledger: Ledger) -> FunctionModel:
    """A scripted pydantic-ai model with a context `window` (see the module docstring)."""

    def decide(messages: list[ModelMessage], info: AgentInfo) -> tuple[Any, int]:
        chat = to_chat(messages, info.instructions)
        tools = [{"name": t.name, "description": t.description,
                  "parameters": t.parameters_json_schema} for t in info.function_tools]
        tokens = ledger.check(chat, window=window, tools=tools or None)
        return reply_for(chat), tokens

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reply, tokens = decide(messages, info)
        usage = RequestUsage(input_tokens=tokens, output_tokens=20)
        if reply.calls:
            return ModelResponse(parts=[ToolCallPart(tool_name="lookup_record",
                                                     args={"record_id": r}) for r in reply.calls],
                                 usage=usage, model_name=name)
        ledger.answers.append(reply.text)
        return ModelResponse(parts=[TextPart(reply.text)], usage=usage, model_name=name)

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        reply, _ = decide(messages, info)
        if reply.calls:
            yield {i: DeltaToolCall(name="lookup_record", json_args=json.dumps({"record_id": r}))
                   for i, r in enumerate(reply.calls)}
            return
        ledger.answers.append(reply.text)
        for word in reply.text.split(" "):
            yield word + " "

    return FunctionModel(answer, stream_function=stream, model_name=name)


def lookup_record(record_id: str) -> str:
    """Look up a record by its id (R-0000) and return its full text."""
    return lookup(record_id)
