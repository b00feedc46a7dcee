"""pydantic-ai-harness `SummarizingCompaction` (run in the peers venv).

Driven through its real `before_model_request` hook with a `RunContext` and a
`ModelRequestContext`, as pydantic-ai's agent graph calls it before every model request; the
compaction it persists (`ctx.messages[:] = ...`) carries over to the next call, as in a run.
The summariser is a pydantic-ai `FunctionModel` answering with the offline fake, so the
harness's own summary agent, prompt and transcript formatting all run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage
from pydantic_ai_harness import SummarizingCompaction

from .common import TAIL_TOKENS, TRIGGER_TOKENS, Neutral


def echo_model(summarize: Callable[[str], str]) -> FunctionModel:
    """A pydantic-ai model that never leaves the process: it answers with the fake summary."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        texts = [info.instructions or ""]
        for m in messages:
            texts += [str(getattr(p, "content", "")) for p in m.parts]
        return ModelResponse(parts=[TextPart(summarize("\n".join(texts)))])

    return FunctionModel(answer, model_name="offline-echo")


# --------------------------------------------------------------------------- conversion


def to_pydantic_ai(msgs: Sequence[Neutral]) -> list[ModelMessage]:
    """Workload messages as pydantic-ai messages; consecutive tool results share a request."""
    out: list[ModelMessage] = []
    pending: list[ToolReturnPart] = []

    def flush() -> None:
        if pending:
            out.append(ModelRequest(parts=list(pending)))
            pending.clear()

    for m in msgs:
        role = m["role"]
        if role == "tool":
            pending.append(ToolReturnPart(tool_name=m.get("tool_name") or "tool",
                                          content=m["text"], tool_call_id=m["call_id"]))
            continue
        flush()
        if role == "user":
            out.append(ModelRequest(parts=[UserPromptPart(content=m["text"])]))
        elif role == "system":
            out.append(ModelRequest(parts=[SystemPromptPart(content=m["text"])]))
        else:
            parts: list[Any] = [TextPart(m["text"])]
            parts += [ToolCallPart(tool_name=c["name"], args=c["args"], tool_call_id=c["id"])
                      for c in m["calls"]]
            out.append(ModelResponse(parts=parts, model_name="gpt-4o"))
    flush()
    return out


def to_openai(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """pydantic-ai messages as chat-completions messages, part for part, with no repair.

    Request parts go out in their order; a `CompactionPart` summary becomes user text, as
    pydantic-ai's `_sendable_request_parts` renders it.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, ModelResponse):
            texts = [p.content for p in m.parts if isinstance(p, TextPart) and p.content]
            calls = [p for p in m.parts if isinstance(p, ToolCallPart)]
            msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            if calls:
                msg["tool_calls"] = [
                    {"id": c.tool_call_id, "type": "function",
                     "function": {"name": c.tool_name, "arguments": c.args_as_json_str()}}
                    for c in calls
                ]
            out.append(msg)
            continue
        for p in m.parts:
            if isinstance(p, SystemPromptPart):
                out.append({"role": "system", "content": p.content})
            elif isinstance(p, ToolReturnPart):
                content = p.content if isinstance(p.content, str) else json.dumps(p.content)
                out.append({"role": "tool", "tool_call_id": p.tool_call_id, "content": content})
            elif isinstance(p, UserPromptPart):
                content = p.content if isinstance(p.content, str) else "\n".join(
                    str(getattr(x, "content", x)) for x in p.content)
                out.append({"role": "user", "content": content})
            elif isinstance(p, CompactionPart):
                out.append({"role": "user", "content": p.content or ""})
    return out


# --------------------------------------------------------------------------- system


class PydanticAiSummarizing:
    """`SummarizingCompaction(max_tokens=T, keep_tokens=K)`, harness defaults otherwise
    (tool returns cut to 500 characters for the summariser, first user message kept)."""

    name = "pydantic-ai-harness-summarizing"

    def __init__(self, summarize: Callable[[str], str]) -> None:
        self.model = echo_model(summarize)
        self.capability = SummarizingCompaction(
            model=self.model, max_tokens=TRIGGER_TOKENS, keep_tokens=TAIL_TOKENS
        )
        self.history: list[ModelMessage] = []
        self.loop = asyncio.new_event_loop()

    def ingest(self, new: Sequence[Neutral]) -> None:
        self.history.extend(to_pydantic_ai(new))

    def decide(self) -> list[ModelMessage]:
        ctx = RunContext(deps=None, model=self.model, usage=RunUsage(), messages=self.history)
        request = ModelRequestContext(
            model=self.model, messages=list(self.history), model_settings=None,
            model_request_parameters=ModelRequestParameters(),
        )
        result = self.loop.run_until_complete(self.capability.before_model_request(ctx, request))
        self.history = ctx.messages  # the hook persists its compaction into the run history
        return result.messages

    def to_openai(self, request: list[ModelMessage]) -> list[dict[str, Any]]:
        return to_openai(request)


def estimate(msgs: Sequence[Neutral], model: str) -> int:
    """The harness's own estimate (about 4 characters per token) of these messages."""
    from pydantic_ai_harness.compaction._shared import estimate_token_count

    del model  # no per-model setting without a tokenizer

    return estimate_token_count(to_pydantic_ai(msgs))
